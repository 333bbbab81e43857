"""The RDF search's vectorised wrap of the second selection (csrc/rdf_cells.h) at every vector width this CPU
has, against MDAnalysis's capped_distance + np.histogram (InterRDF's steps): atoms several boxes out (the
scalar code's path), atoms on the box's faces and within roundings of the triclinic cell's bounds (where a
float32 comparison could differ from MDAnalysis's double one), and selections that share atoms."""

from __future__ import annotations

import numpy as np
import pytest
from MDAnalysis.lib.distances import capped_distance

from trajscale.kernels import _pairs, pairs
from trajscale.kernels.geometry import triclinic_vectors

LEVELS = sorted({0, 2, 3} & set(range(_pairs.SIMD_LEVEL + 1)))

BOXES = {
    "orthorhombic": [41.0, 37.5, 45.25, 90, 90, 90],
    "dodecahedron": [48.0, 48.0, 48.0, 60, 60, 90],
    "octahedron": [46.0, 46.0, 46.0, 70.53, 109.47, 70.53],
    "triclinic": [43.0, 46.0, 41.0, 75, 95, 105],
}


@pytest.fixture(params=LEVELS, ids=lambda v: f"simd{v}")
def level(request):
    before = _pairs.set_simd_level(request.param)
    yield request.param
    _pairs.set_simd_level(before)


def reference(x, i1, i2, dims, cutoff, edges, exclusion=None):
    """InterRDF._single_frame's counts, summed over frames."""
    out = np.zeros(len(edges) - 1)
    for f in range(len(x)):
        p, d = capped_distance(x[f, i1], x[f, i2], cutoff, box=dims[f])
        if exclusion is not None:
            d = d[p[:, 0] // exclusion[0] != p[:, 1] // exclusion[1]]
        out += np.histogram(d, bins=len(edges) - 1, range=(edges[0], edges[-1]))[0]
    return out


def on_the_bounds(rng, dims, n):
    """Points of each frame's box on its faces, on the triclinic cell's bounds and a few float32 roundings
    either side of them, one and two box vectors out."""
    box = triclinic_vectors(dims).astype(np.float32)   # (F, 3, 3) rows
    f = rng.uniform(0, 1, (len(dims), n, 3))
    f[:, : n // 4, 0] = rng.choice([0.0, 1.0, -1.0, 2.0], (len(dims), n // 4))
    f[:, n // 4: n // 2, 1] = rng.choice([0.0, 1.0, -1.0, 2.0], (len(dims), n // 4))
    f[:, n // 2: 3 * n // 4, 2] = rng.choice([0.0, 1.0, -1.0, 2.0], (len(dims), n // 4))
    x = np.einsum("fni,fij->fnj", f, box.astype(np.float64)).astype(np.float32)
    steps = rng.integers(-3, 4, x.shape)
    for _ in range(3):
        x = np.where(steps > 0, np.nextafter(x, np.float32(np.inf)),
                     np.where(steps < 0, np.nextafter(x, np.float32(-np.inf)), x))
        steps -= np.sign(steps)
    return x


def per_cutoff(dims, cutoff, n_b, n_a):
    """The cells per cut-off of each frame's search, as rdf_histogram plans it (the larger selection's grid)."""
    box9 = triclinic_vectors(np.asarray(dims, np.float32)).astype(np.float32).reshape(-1, 9)
    brute = pairs.mdanalysis_method_is_brute_force(n_a, n_b, cutoff, np.asarray(dims, np.float32), box9)
    return pairs.search_grids(box9, cutoff, max(n_a, n_b), ~brute)[1]


@pytest.mark.parametrize("shape", list(BOXES))
def test_far_and_boundary_atoms_equal_capped_distance(shape, level):
    """B: water-dense atoms, a tenth of them moved 1 to 3 box vectors out, and atoms on the bounds; A: 150
    atoms of B itself (the selections overlap) and 60 of their own."""
    rng = np.random.default_rng(41)
    n_frames, cutoff = 3, 7.0
    dims = np.tile(np.asarray(BOXES[shape], np.float32), (n_frames, 1))
    dims[:, :3] *= rng.uniform(0.98, 1.02, (n_frames, 1)).astype(np.float32)
    box = triclinic_vectors(dims).astype(np.float32)
    b = rng.uniform(-5, 50, (n_frames, 3000, 3)).astype(np.float32)
    far = rng.random((n_frames, 3000)) < 0.1
    shift = np.einsum("fni,fij->fnj", rng.integers(-3, 4, (n_frames, 3000, 3)).astype(np.float32), box)
    b = np.where(far[..., None], b + shift, b).astype(np.float32)
    x = np.concatenate([b, on_the_bounds(rng, dims, 400), rng.uniform(-60, 110, (n_frames, 60, 3))],
                       axis=1).astype(np.float32)
    i2 = np.arange(3400)
    i1 = np.concatenate([rng.choice(3400, 150, replace=False), 3400 + np.arange(60)])
    assert (per_cutoff(dims, cutoff, len(i2), len(i1)) == pairs.CELLS_PER_CUTOFF).all()
    edges = np.histogram_bin_edges(np.empty(0), bins=75, range=(0.0, cutoff))
    ref = reference(x, i1, i2, dims, cutoff, edges)
    assert ref.sum() > 10_000 and ref[0] > 0   # the shared atoms' zero distances are counted
    got, done = pairs.rdf_histogram(x, i1, i2, dims, cutoff, edges)
    assert done.all()
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("shape", ["orthorhombic", "dodecahedron"])
def test_a_selection_against_itself_with_far_atoms(shape, level):
    """One selection on both sides, exclusion block (1, 1), atoms up to 3 boxes out."""
    rng = np.random.default_rng(5)
    dims = np.tile(np.asarray(BOXES[shape], np.float32), (2, 1))
    box = triclinic_vectors(dims).astype(np.float32)
    x = rng.uniform(0, 45, (2, 2000, 3)).astype(np.float32)
    x = (x + np.einsum("fni,fij->fnj", rng.integers(-3, 4, (2, 2000, 3)).astype(np.float32), box)).astype(np.float32)
    idx = np.arange(2000)
    edges = np.histogram_bin_edges(np.empty(0), bins=40, range=(0.0, 6.0))
    assert (per_cutoff(dims, 6.0, 2000, 2000) == pairs.CELLS_PER_CUTOFF).all()
    ref = reference(x, idx, idx, dims, 6.0, edges, (1, 1))
    assert ref.sum() > 10_000
    np.testing.assert_array_equal(pairs.rdf_histogram(x, idx, idx, dims, 6.0, edges, (1, 1))[0], ref)


def test_adk_in_water_with_molecules_moved_by_box_vectors(level):
    """The one-pass benchmark's workload on the real system (AdK in water, a rhombic dodecahedron), CA
    against the water oxygens, with a fifth of the oxygens moved 1 to 3 box vectors out and some CA atoms
    among the second selection."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import TPR, XTC

    u = mda.Universe(TPR, XTC)
    ca, ow = u.select_atoms("protein and name CA"), u.select_atoms("name OW")
    rng = np.random.default_rng(2)
    frames = [ts.positions.copy() for ts in u.trajectory[:4]]
    dims = np.array([ts.dimensions.copy() for ts in u.trajectory[:4]], np.float32)
    box = triclinic_vectors(dims).astype(np.float32)
    x = np.stack(frames).astype(np.float32)
    moved = rng.choice(ow.indices, ow.n_atoms // 5, replace=False)
    x[:, moved] += np.einsum("fni,fij->fnj", rng.integers(-3, 4, (len(x), len(moved), 3)).astype(np.float32), box)
    i1, i2 = ca.indices, np.concatenate([ow.indices, ca.indices[::7]])
    assert (per_cutoff(dims, 8.0, len(i2), len(i1)) == pairs.CELLS_PER_CUTOFF).all()
    edges = np.histogram_bin_edges(np.empty(0), bins=75, range=(0.0, 8.0))
    ref = reference(x, i1, i2, dims, 8.0, edges)
    assert ref.sum() > 10_000
    np.testing.assert_array_equal(pairs.rdf_histogram(x, i1, i2, dims, 8.0, edges)[0], ref)


@pytest.mark.parametrize("shape", list(BOXES))
def test_wrapped_coordinates_are_apply_pbc_bit_for_bit(shape, level):
    """The second selection's wrap equals MDAnalysis's apply_PBC bit for bit (atoms on the bounds, a few
    roundings either side of them, and up to 3 boxes out), and its cells are _cell_r's, computed here in
    NumPy float64."""
    from MDAnalysis.lib.distances import apply_PBC

    rng = np.random.default_rng(17)
    dims = np.asarray([BOXES[shape]], np.float32)
    box9 = triclinic_vectors(dims).astype(np.float32).reshape(-1, 9)
    x = np.concatenate([on_the_bounds(rng, dims, 4000)[0], rng.uniform(-150, 200, (2000, 3))]).astype(np.float32)
    x[::3] += np.einsum("ni,ij->nj", rng.integers(-3, 4, (len(x[::3]), 3)).astype(np.float32),
                        box9.reshape(3, 3)).astype(np.float32)
    ncells = pairs.search_grids(box9, 7.0, len(x), np.array([True]))[0][0]
    idx = rng.permutation(len(x))
    wrapped, cells = _pairs.wrap_cells(x, idx, box9[0], dims[0], shape != "orthorhombic", ncells)
    ref = apply_PBC(x[idx], dims[0])
    np.testing.assert_array_equal(wrapped.view(np.int32), ref.view(np.int32))
    h = box9[0].astype(np.float64)
    s2 = ref[:, 2] * (1.0 / h[8])
    s1 = (ref[:, 1] - s2 * h[7]) * (1.0 / h[4])
    s0 = (ref[:, 0] - s1 * h[3] - s2 * h[6]) * (1.0 / h[0])
    c = []
    for s, n in zip((s0, s1, s2), ncells, strict=True):   # _clamp_trunc of s * n
        v = s * n
        c.append(np.where(v >= 0, np.where(v >= n, n - 1, np.trunc(np.where(v >= 0, v, 0))), 0).astype(np.int64))
    np.testing.assert_array_equal(cells, (c[2] * ncells[1] + c[1]) * ncells[0] + c[0])


@pytest.mark.parametrize("shape", ["orthorhombic", "dodecahedron", "triclinic"])
def test_distances_within_roundings_of_the_bin_edges(shape, level):
    """Pairs placed at a bin edge (or the cut-off) plus or minus a few millionths of an Å, many of them across
    the box's faces: where the float32 first look and MDAnalysis's double distance fall either side of an
    edge, the pair is MDAnalysis's (the bins of squared distances leave such pairs to the exact arithmetic)."""
    rng = np.random.default_rng(29)
    dims = np.asarray([BOXES[shape]], np.float32)
    box = triclinic_vectors(dims).astype(np.float64)[0]
    cutoff, n = 7.0, 2500
    edges = np.histogram_bin_edges(np.empty(0), bins=70, range=(0.0, cutoff))
    a = rng.uniform(0, 1, (n, 3)) @ box
    u = rng.normal(size=(n, 3))
    u /= np.linalg.norm(u, axis=1)[:, None]
    r = edges[rng.integers(1, len(edges), n)] + rng.choice([-1, 1], n) * rng.uniform(0, 4e-6, n)
    b = a + u * r[:, None]
    x = np.concatenate([a, b, rng.uniform(0, 1, (1500, 3)) @ box])[None].astype(np.float32)
    i1, i2 = np.arange(n), np.arange(n, len(x[0]))
    assert (per_cutoff(dims, cutoff, len(i2), len(i1)) == pairs.CELLS_PER_CUTOFF).all()
    ref = reference(x, i1, i2, dims, cutoff, edges)
    np.testing.assert_array_equal(pairs.rdf_histogram(x, i1, i2, dims, cutoff, edges)[0], ref)


@pytest.mark.parametrize("dims", [[40.0, 40.0, 40.0, 60, 60, 60], [30.0, 31.0, 29.0, 118, 115, 64]])
def test_sheared_boxes_whose_rows_reach_past_the_safe_radius(dims, level):
    """Boxes so sheared that a row of neighbour cells reaches past half the box's smallest width: there the
    row's image is not surely the nearest, yet a pair within the cut-off is met on the row of its image
    within it, so the first look leaves out every candidate past the cut-off, whatever its nearest image."""
    rng = np.random.default_rng(13)
    dims = np.asarray([dims, dims], np.float32)
    box = triclinic_vectors(dims).astype(np.float64)[0]
    cutoff = 6.0
    x = (rng.uniform(-0.2, 1.2, (2, 3000, 3)) @ box).astype(np.float32)
    i1, i2 = np.arange(300), np.arange(300, 3000)
    assert (per_cutoff(dims, cutoff, len(i2), len(i1)) == pairs.CELLS_PER_CUTOFF).all()
    edges = np.histogram_bin_edges(np.empty(0), bins=48, range=(0.0, cutoff))
    ref = reference(x, i1, i2, dims, cutoff, edges)
    assert ref.sum() > 5_000
    np.testing.assert_array_equal(pairs.rdf_histogram(x, i1, i2, dims, cutoff, edges)[0], ref)
