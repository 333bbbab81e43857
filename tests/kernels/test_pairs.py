"""The RDF cell list against MDAnalysis's capped_distance + np.histogram (InterRDF's own steps), bin for bin."""

from __future__ import annotations

import numpy as np
import pytest
from MDAnalysis.lib.distances import capped_distance
from MDAnalysis.lib.mdamath import triclinic_vectors as mda_vectors

from trajscale.kernels import geometry, pairs

pytest.importorskip("numba")


def histogram(a, b, dims, cutoff, edges, exclusion=None):
    """The kernel on selections a, b given as one block (atoms of a, then of b)."""
    x = np.concatenate([a, b], axis=1)
    return pairs.rdf_histogram(x, np.arange(a.shape[1]), a.shape[1] + np.arange(b.shape[1]), dims, cutoff,
                               edges, exclusion)


def reference(a, b, dims, cutoff, edges, exclusion=None):
    """InterRDF._single_frame's counts, summed over frames."""
    out = np.zeros(len(edges) - 1)
    for f in range(len(a)):
        p, d = capped_distance(a[f], b[f], cutoff, box=dims[f])
        if exclusion is not None:
            d = d[p[:, 0] // exclusion[0] != p[:, 1] // exclusion[1]]
        out += np.histogram(d, bins=len(edges) - 1, range=(edges[0], edges[-1]))[0]
    return out


BOXES = {
    "orthorhombic": [31.0, 27.5, 35.25, 90, 90, 90],
    "dodecahedron": [80.017, 80.017, 80.017, 60, 60, 90],   # the AdK water box
    "triclinic": [33.0, 36.0, 31.0, 75, 95, 105],
}


@pytest.mark.parametrize("shape", list(BOXES))
@pytest.mark.parametrize("cutoff", [6.0, 13.0])   # grid search, and MDAnalysis's brute force (> 0.3 box)
def test_rdf_counts_equal_capped_distance(shape, cutoff):
    rng = np.random.default_rng(11)
    n_frames = 4
    dims = np.tile(np.asarray(BOXES[shape], np.float32), (n_frames, 1))
    dims[:, :3] *= rng.uniform(0.97, 1.03, (n_frames, 1)).astype(np.float32)   # NPT: a box per frame
    # coordinates well outside the box too (MDAnalysis's multi-box shifts)
    a = rng.uniform(-60, 100, (n_frames, 150, 3)).astype(np.float32)
    b = rng.uniform(-60, 100, (n_frames, 700, 3)).astype(np.float32)
    edges = np.histogram_bin_edges(np.empty(0), bins=37, range=(0.5, cutoff))
    got, done = histogram(a, b, dims, cutoff, edges)
    assert done.all()
    ref = reference(a, b, dims, cutoff, edges)
    assert ref.sum() > 1000
    np.testing.assert_array_equal(got, ref)


def test_rdf_counts_exclusion_block_and_self():
    rng = np.random.default_rng(5)
    dims = np.tile(np.asarray(BOXES["triclinic"], np.float32), (3, 1))
    x = rng.uniform(0, 30, (3, 400, 3)).astype(np.float32)
    edges = np.histogram_bin_edges(np.empty(0), bins=20, range=(0.0, 8.0))
    got, _ = histogram(x, x, dims, 8.0, edges, (1, 1))
    np.testing.assert_array_equal(got, reference(x, x, dims, 8.0, edges, (1, 1)))


def test_rdf_counts_on_bin_edges_and_cutoff():
    """Distances exactly on bin edges and on the cut-off land where np.histogram puts them."""
    grid = np.stack(np.meshgrid(*[np.arange(0, 20, 0.5)] * 3, indexing="ij"), -1).reshape(1, -1, 3)
    a = grid.astype(np.float32)[:, ::97]
    b = grid.astype(np.float32)
    dims = np.array([[20.0, 20.0, 20.0, 90, 90, 90]], np.float32)
    edges = np.histogram_bin_edges(np.empty(0), bins=8, range=(0.0, 4.0))
    got, _ = histogram(a, b, dims, 4.0, edges)
    np.testing.assert_array_equal(got, reference(a, b, dims, 4.0, edges))


def test_frames_without_box_are_left_to_the_caller():
    a = np.zeros((2, 12, 3), np.float32)
    dims = np.array([[30, 30, 30, 90, 90, 90], [0, 0, 0, 0, 0, 0]], np.float32)
    _, done = histogram(a, a, dims, 5.0, np.linspace(0, 5, 6))
    assert done.tolist() == [True, False]


def test_box_vectors_equal_mdanalysis_bit_for_bit():
    """The kernels wrap with MDAnalysis's float32 box vectors; ours must be the same numbers."""
    rng = np.random.default_rng(3)
    dims = np.zeros((300, 6), np.float32)
    dims[:, :3] = rng.uniform(20, 120, (300, 3))
    dims[:, 3:] = rng.uniform(60, 120, (300, 3))
    dims[:50, 3:] = 90.0
    ours = geometry.triclinic_vectors(dims).astype(np.float32)
    for f in range(len(dims)):
        np.testing.assert_array_equal(ours[f], mda_vectors(dims[f]))


def test_perpendicular_widths():
    h = geometry.triclinic_vectors(np.array([[10, 20, 30, 90, 90, 90], [80.017, 80.017, 80.017, 60, 60, 90]]))
    w = geometry.perpendicular_widths(h)
    np.testing.assert_allclose(w[0], [10, 20, 30])
    # the rhombic dodecahedron's faces are all sqrt(2/3) a apart... except along c (a / sqrt(2))
    for i in range(3):
        n = np.cross(h[1, (i + 1) % 3], h[1, (i + 2) % 3])
        np.testing.assert_allclose(w[1, i], abs(h[1, i] @ n) / np.linalg.norm(n))
    assert np.sqrt(geometry.safe_radius2(h[1:]))[0] == pytest.approx(w[1].min() / 2, rel=1e-5)
