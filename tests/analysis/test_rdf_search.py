"""The RDF's search of a periodic box on cells a fraction of the cut-off thick (the sorted search), against
MDAnalysis: InterRDF's own counts on AdK in water and on YiiP in its membrane (the shapes of selections the
search chooses its grid for: large x small, small x large, small x small, all water), in both orders of the
selections and at every vector width, and capped_distance + np.histogram (InterRDF's steps) on dense boxes
of every shape, with exclusion blocks and boxes too small or too sparse for the finer cells."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from MDAnalysis.lib.distances import capped_distance

from trajscale.kernels import _pairs, pairs
from trajscale.kernels.geometry import perpendicular_widths, triclinic_vectors

LEVELS = sorted({0, 2, 3} & set(range(_pairs.SIMD_LEVEL + 1)))


@pytest.fixture(params=LEVELS, ids=lambda v: f"simd{v}")
def level(request):
    before = _pairs.set_simd_level(request.param)
    yield request.param
    _pairs.set_simd_level(before)


def counts_of(a, b, dims, cutoff, edges, exclusion=None):
    x = np.ascontiguousarray(np.concatenate([a, b], axis=1))
    got, done = pairs.rdf_histogram(x, np.arange(a.shape[1]), a.shape[1] + np.arange(b.shape[1]), dims, cutoff,
                                    edges, exclusion)
    assert done.all()
    return got


def reference(a, b, dims, cutoff, edges, exclusion=None):
    """InterRDF._single_frame's counts, summed over frames."""
    out = np.zeros(len(edges) - 1)
    for f in range(len(a)):
        p, d = capped_distance(a[f], b[f], cutoff, box=dims[f])
        if exclusion is not None:
            d = d[p[:, 0] // exclusion[0] != p[:, 1] // exclusion[1]]
        out += np.histogram(d, bins=len(edges) - 1, range=(edges[0], edges[-1]))[0]
    return out


def per_cutoff(dims, cutoff, n_b, n_a=100):
    """The cells per cut-off of each frame's search, as rdf_histogram plans it (the larger selection's grid)."""
    box9 = triclinic_vectors(np.asarray(dims, np.float32)).astype(np.float32).reshape(-1, 9)
    brute = pairs.mdanalysis_method_is_brute_force(n_a, n_b, cutoff, np.asarray(dims, np.float32), box9)
    return pairs.search_grids(box9, cutoff, max(n_a, n_b), ~brute)[1]


def test_adk_in_water_equals_interrdf():
    """The workload of the one-pass benchmark (CA against water oxygens, 75 bins to 8 Å, a rhombic
    dodecahedron), searched on the finer cells, has InterRDF's counts and g(r)."""
    from MDAnalysis.analysis.rdf import InterRDF
    from MDAnalysisTests.datafiles import TPR, XTC

    import trajscale as ts

    u = adk_water()[0]   # the module's Universe of TPR/XTC (its frame-0 copies are taken; runs rewind it)
    ca, ow = u.select_atoms("protein and name CA"), u.select_atoms("name OW")
    assert (per_cutoff(u.dimensions[None], 8.0, ow.n_atoms, ca.n_atoms) == pairs.CELLS_PER_CUTOFF).all()
    ref = InterRDF(ca, ow, nbins=75, range=(0.0, 8.0)).run()
    got = ts.run(ts.RDF("protein and name CA", "name OW", nbins=75, range=(0, 8)), TPR, XTC, executor="serial")
    assert ref.results.count.sum() > 10_000
    np.testing.assert_array_equal(got.count, ref.results.count)
    np.testing.assert_allclose(got.rdf, ref.results.rdf, rtol=1e-12)


BOXES = {
    "orthorhombic": [41.0, 37.5, 45.25, 90, 90, 90],
    "dodecahedron": [48.0, 48.0, 48.0, 60, 60, 90],
    "octahedron": [46.0, 46.0, 46.0, 70.53, 109.47, 70.53],
    "triclinic": [43.0, 46.0, 41.0, 75, 95, 105],
}


@pytest.mark.parametrize("shape", list(BOXES))
def test_dense_boxes_equal_capped_distance(shape):
    """Water-dense B atoms, A atoms inside and far outside the box (wrapped first), a box per frame."""
    rng = np.random.default_rng(23)
    n_frames, cutoff = 3, 7.0
    dims = np.tile(np.asarray(BOXES[shape], np.float32), (n_frames, 1))
    dims[:, :3] *= rng.uniform(0.98, 1.02, (n_frames, 1)).astype(np.float32)
    a = rng.uniform(-80, 130, (n_frames, 120, 3)).astype(np.float32)
    b = rng.uniform(-5, 50, (n_frames, 3000, 3)).astype(np.float32)
    assert (per_cutoff(dims, cutoff, b.shape[1]) == pairs.CELLS_PER_CUTOFF).all()
    edges = np.histogram_bin_edges(np.empty(0), bins=75, range=(0.0, cutoff))
    ref = reference(a, b, dims, cutoff, edges)
    assert ref.sum() > 10_000
    np.testing.assert_array_equal(counts_of(a, b, dims, cutoff, edges), ref)


@pytest.mark.parametrize("shape", ["orthorhombic", "triclinic"])
def test_exclusion_blocks_on_the_finer_cells(shape):
    """A selection against itself with (1, 1) and molecules of 3 atoms against 3 with (3, 3)."""
    rng = np.random.default_rng(8)
    dims = np.tile(np.asarray(BOXES[shape], np.float32), (2, 1))
    x = rng.uniform(0, 45, (2, 1500, 3)).astype(np.float32)
    edges = np.histogram_bin_edges(np.empty(0), bins=40, range=(0.0, 6.0))
    assert (per_cutoff(dims, 6.0, 1500) == pairs.CELLS_PER_CUTOFF).all()
    for block in [(1, 1), (3, 3)]:
        ref = reference(x, x, dims, 6.0, edges, block)
        assert ref.sum() > 10_000
        np.testing.assert_array_equal(counts_of(x, x, dims, 6.0, edges, block), ref)


def test_sparse_selections_searched_on_cells_a_cut_off_thick():
    """Few atoms on both sides cap the cells (8 per atom of the grid's selection for the finer ones, 2 for
    cells a cut-off thick): too few for the finer cells, 3 or more a cut-off thick; both orders."""
    rng = np.random.default_rng(3)
    dims = np.tile(np.asarray([44.0, 44.0, 44.0, 90, 90, 90], np.float32), (4, 1))
    a = rng.uniform(0, 44, (4, 40, 3)).astype(np.float32)
    b = rng.uniform(0, 44, (4, 30, 3)).astype(np.float32)
    assert (per_cutoff(dims, 9.0, 30, 40) == 1).all()
    edges = np.histogram_bin_edges(np.empty(0), bins=30, range=(0.0, 9.0))
    ref = reference(a, b, dims, 9.0, edges)
    assert ref.sum() > 100
    np.testing.assert_array_equal(counts_of(a, b, dims, 9.0, edges), ref)
    np.testing.assert_array_equal(counts_of(b, a, dims, 9.0, edges), reference(b, a, dims, 9.0, edges))


def test_pairs_on_cell_faces_and_bin_edges():
    """Atoms on a lattice whose spacing divides the box: many lie on cell faces and many distances
    on bin edges and on the cut-off itself."""
    g = np.stack(np.meshgrid(*[np.arange(0, 24, 0.75)] * 3, indexing="ij"), -1).reshape(1, -1, 3)
    a = g.astype(np.float32)[:, ::53]
    b = g.astype(np.float32)
    dims = np.array([[24.0, 24.0, 24.0, 90, 90, 90]], np.float32)
    assert (per_cutoff(dims, 4.5, b.shape[1], a.shape[1]) == pairs.CELLS_PER_CUTOFF).all()
    edges = np.histogram_bin_edges(np.empty(0), bins=12, range=(0.0, 4.5))
    np.testing.assert_array_equal(counts_of(a, b, dims, 4.5, edges), reference(a, b, dims, 4.5, edges))


@pytest.mark.parametrize("shape", ["orthorhombic", "triclinic"])
def test_exclusion_blocks_of_unequal_selections_in_both_orders(shape, level):
    """Molecules of 4 atoms against a selection of 1 atom a molecule, each near its molecule, with (4, 1), and
    the same the other way with (1, 4): the larger selection makes the grid in either order, and the blocks
    follow their selections."""
    rng = np.random.default_rng(17)
    dims = np.tile(np.asarray(BOXES[shape], np.float32), (2, 1))
    a = rng.uniform(0, 44, (2, 1600, 3)).astype(np.float32)
    b = (a[:, ::4] + rng.uniform(-1.5, 1.5, (2, 400, 3))).astype(np.float32)
    edges = np.histogram_bin_edges(np.empty(0), bins=40, range=(0.0, 6.0))
    ab, ba = reference(a, b, dims, 6.0, edges, (4, 1)), reference(b, a, dims, 6.0, edges, (1, 4))
    assert ab.sum() > 10_000 and ab.sum() < reference(a, b, dims, 6.0, edges).sum()   # the blocks leave pairs out
    np.testing.assert_array_equal(ab, ba)
    np.testing.assert_array_equal(counts_of(a, b, dims, 6.0, edges, (4, 1)), ab)
    np.testing.assert_array_equal(counts_of(b, a, dims, 6.0, edges, (1, 4)), ba)


#: The shapes the search's plan is chosen for, on YiiP in its membrane (a hexagonal box), 75 bins to 15 Å.
YIIP_SHAPES = {
    "P-P": ("name P", "name P"),
    "protein heavy atoms-P": ("protein and not name H*", "name P"),
    "CA-P": ("protein and name CA", "name P"),
    "small x small": ("resname ZNM", "resname POPG and name P"),
}


@functools.lru_cache(maxsize=None)
def yiip():
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import GRO_MEMPROT, XTC_MEMPROT

    u = mda.Universe(GRO_MEMPROT, XTC_MEMPROT)
    x = np.stack([ts.positions.copy() for ts in u.trajectory]).astype(np.float32)
    return u, x, np.array([ts.dimensions.copy() for ts in u.trajectory], np.float32)


@functools.lru_cache(maxsize=None)
def yiip_interrdf(s1: str, s2: str) -> np.ndarray:
    from MDAnalysis.analysis.rdf import InterRDF

    u = yiip()[0]
    return InterRDF(u.select_atoms(s1), u.select_atoms(s2), nbins=75, range=(0.0, 15.0)).run().results.count


@pytest.mark.parametrize("swap", [False, True], ids=["as named", "swapped"])
@pytest.mark.parametrize("shape", list(YIIP_SHAPES))
def test_yiip_shapes_equal_interrdf_in_both_orders(shape, swap, level):
    """Large x small, small x large, equal and small x small selections: InterRDF's counts in either order."""
    s1, s2 = YIIP_SHAPES[shape][::-1] if swap else YIIP_SHAPES[shape]
    u, x, dims = yiip()
    ref = yiip_interrdf(s1, s2)
    assert ref.sum() > 50
    edges = np.histogram_bin_edges(np.empty(0), bins=75, range=(0.0, 15.0))
    got, done = pairs.rdf_histogram(x, u.select_atoms(s1).indices, u.select_atoms(s2).indices, dims, 15.0, edges)
    assert done.all()
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("shape", ["protein heavy atoms-P", "CA-P"])
def test_the_larger_selection_makes_the_grid_of_cells_half_a_cut_off_thick(shape):
    """A large first selection against a small second one: the first makes the grid, on cells half a
    cut-off thick, never thicker (the small one's grid was capped at 2 cells an atom and searched 2 cells
    out all the same: up to 4 cut-offs across, twice the time of the search before it)."""
    u, x, dims = yiip()
    n1, n2 = (u.select_atoms(s).n_atoms for s in YIIP_SHAPES[shape])
    assert n1 > n2 and pairs.grid_holds_first(n1, n2) and not pairs.grid_holds_first(n2, n1)
    box9 = triclinic_vectors(dims).astype(np.float32).reshape(-1, 9)
    brute = pairs.mdanalysis_method_is_brute_force(n1, n2, 15.0, dims, box9)
    cells, k = pairs.search_grids(box9, 15.0, n1, ~brute)
    assert (k == pairs.CELLS_PER_CUTOFF).all()
    widths = perpendicular_widths(box9.reshape(-1, 3, 3).astype(np.float64))
    np.testing.assert_array_equal(cells, np.floor(2 * widths / (15.0 + 1e-3)))


@functools.lru_cache(maxsize=None)
def adk_water():
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import TPR, XTC

    u = mda.Universe(TPR, XTC)
    return u, u.trajectory[0].positions.copy()[None], u.trajectory[0].dimensions.copy()[None]


@functools.lru_cache(maxsize=None)
def adk_interrdf(s1: str, step1: int, s2: str, step2: int, cutoff: float, exclusion=None) -> np.ndarray:
    """InterRDF's counts in the first frame of every ``step1``-th atom of ``s1`` against every ``step2``-th of
    ``s2``, 75 bins to ``cutoff``."""
    from MDAnalysis.analysis.rdf import InterRDF

    u = adk_water()[0]
    g1, g2 = u.select_atoms(s1)[::step1], u.select_atoms(s2)[::step2]
    return InterRDF(g1, g2, nbins=75, range=(0.0, cutoff), exclusion_block=exclusion).run(stop=1).results.count


def test_all_water_oxygens_equal_interrdf():
    """O-O of every water (11,084 x 11,084, 8 Å, exclusion block (1, 1)) in AdK's dodecahedron."""
    u, x, dims = adk_water()
    ow = u.select_atoms("name OW").indices
    ref = adk_interrdf("name OW", 1, "name OW", 1, 8.0, (1, 1))
    assert ref.sum() > 500_000
    edges = np.histogram_bin_edges(np.empty(0), bins=75, range=(0.0, 8.0))
    np.testing.assert_array_equal(pairs.rdf_histogram(x, ow, ow, dims, 8.0, edges, (1, 1))[0], ref)


@pytest.mark.parametrize("swap", [False, True], ids=["as named", "swapped"])
def test_water_oxygens_to_15_angstrom_in_a_dodecahedron(swap, level):
    """A cut-off whose rows of neighbour cells reach past half the dodecahedron's width (15 Å, widths of 65 Å):
    only the candidates within the cut-off are computed, InterRDF's counts in either order."""
    u, x, dims = adk_water()
    sides = [("name OW", 1), ("name OW", 20)][::-1 if swap else 1]
    ref = adk_interrdf(*sides[0], *sides[1], 15.0)
    assert ref.sum() > 200_000
    i1, i2 = (u.select_atoms(sel).indices[::step] for sel, step in sides)
    edges = np.histogram_bin_edges(np.empty(0), bins=75, range=(0.0, 15.0))
    np.testing.assert_array_equal(pairs.rdf_histogram(x, i1, i2, dims, 15.0, edges)[0], ref)
