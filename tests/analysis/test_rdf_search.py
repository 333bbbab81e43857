"""The RDF's search of a periodic box on cells a fraction of the cut-off thick (the sorted search), against
MDAnalysis: InterRDF's own counts on AdK in water, and capped_distance + np.histogram (InterRDF's steps)
on dense boxes of every shape, with exclusion blocks and boxes too small or too sparse for the finer cells."""

from __future__ import annotations

import numpy as np
import pytest
from MDAnalysis.lib.distances import capped_distance

from trajscale.kernels import pairs
from trajscale.kernels.geometry import triclinic_vectors


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
    box9 = triclinic_vectors(np.asarray(dims, np.float32)).astype(np.float32).reshape(-1, 9)
    brute = pairs.mdanalysis_method_is_brute_force(n_a, n_b, cutoff, np.asarray(dims, np.float32), box9)
    return pairs.search_grids(box9, cutoff, n_b, ~brute)[1]


def test_adk_in_water_equals_interrdf():
    """The workload of the one-pass benchmark (CA against water oxygens, 75 bins to 8 Å, a rhombic
    dodecahedron), searched on the finer cells, has InterRDF's counts and g(r)."""
    import MDAnalysis as mda
    from MDAnalysis.analysis.rdf import InterRDF
    from MDAnalysisTests.datafiles import TPR, XTC

    import trajscale as ts

    u = mda.Universe(TPR, XTC)
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


def test_a_sparse_selection_searched_on_cells_a_cut_off_thick():
    """Few B atoms cap the cells (2 per atom): too few for the finer cells, 3 or more a cut-off thick."""
    rng = np.random.default_rng(3)
    dims = np.tile(np.asarray([44.0, 44.0, 44.0, 90, 90, 90], np.float32), (4, 1))
    a = rng.uniform(0, 44, (4, 300, 3)).astype(np.float32)
    b = rng.uniform(0, 44, (4, 30, 3)).astype(np.float32)
    assert (per_cutoff(dims, 9.0, 30) == 1).all()
    edges = np.histogram_bin_edges(np.empty(0), bins=30, range=(0.0, 9.0))
    ref = reference(a, b, dims, 9.0, edges)
    assert ref.sum() > 1000
    np.testing.assert_array_equal(counts_of(a, b, dims, 9.0, edges), ref)


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
