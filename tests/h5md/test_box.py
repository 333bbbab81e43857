"""Box conversion, vectorised over frames, against MDAnalysis's own triclinic_vectors."""

from __future__ import annotations

import numpy as np
from MDAnalysis.lib.mdamath import triclinic_box, triclinic_vectors

from trajscale.box import dimensions_to_edges, edges_to_dimensions


def _random_boxes(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dims = np.column_stack([rng.uniform(20, 120, (n, 3)), rng.uniform(50, 130, (n, 3))])
    dims[: n // 10, 3:] = 90.0                                  # orthorhombic
    dims[n // 10: n // 5, 3:] = [60.0, 60.0, 90.0]              # rhombic dodecahedron-like, exact 90
    dims[n // 5: n // 5 + 5] = [[10, 10, 10, 170, 170, 170], [10, 10, 10, 30, 30, 90],   # no cell
                                [0, 10, 10, 90, 90, 90], [10, -1, 10, 90, 90, 90],       # bad edges
                                [10, 10, 10, 180, 90, 90]]
    return dims


def test_dimensions_to_edges_equals_mdanalysis_per_box():
    dims = _random_boxes(5000)
    got = dimensions_to_edges(dims)
    expect = np.array([triclinic_vectors(d, dtype=np.float64) for d in dims])
    assert got.dtype == np.float32 and got.shape == (5000, 3, 3)
    np.testing.assert_allclose(got, expect, rtol=2e-7, atol=2e-5)
    assert (got[1000:1005] == 0).all()                          # invalid boxes: zero vectors, as MDAnalysis
    np.testing.assert_array_equal(got[:500], np.array([triclinic_vectors(d) for d in dims[:500]]))


def test_edges_round_trip_through_dimensions():
    dims = _random_boxes(2000, seed=1)
    dims = dims[(dimensions_to_edges(dims) != 0).any(axis=(1, 2))]
    back = edges_to_dimensions(dimensions_to_edges(dims))
    expect = np.array([triclinic_box(*triclinic_vectors(d, dtype=np.float64)) for d in dims])
    np.testing.assert_allclose(back, expect, rtol=1e-4, atol=1e-3)


def test_100k_distinct_boxes_convert_in_one_vectorised_pass():
    """100,000 NPT boxes (each distinct): exact against MDAnalysis on a sample (speed: benchmarks/boxes.py)."""
    dims = _random_boxes(100_000, seed=2)
    got = dimensions_to_edges(dims)
    pick = np.random.default_rng(3).choice(len(dims), 300, replace=False)
    np.testing.assert_allclose(got[pick], np.array([triclinic_vectors(d, dtype=np.float64) for d in dims[pick]]),
                               rtol=2e-7, atol=2e-5)


def test_diagonal_edges_give_mdanalysis_dimensions_bit_for_bit():
    """Orthorhombic boxes as an XTC stores them (diagonal vectors: the common case, converted without norms
    or arccos) and frames without a box (zero vectors): MDAnalysis's triclinic_box of each, to the bit; one
    triclinic frame among them takes the general path and leaves the others' bits alone."""
    rng = np.random.default_rng(4)
    edges = np.zeros((400, 3, 3), np.float32)
    edges[:, [0, 1, 2], [0, 1, 2]] = rng.uniform(0.5, 200.0, (400, 3)).astype(np.float32)
    edges[::40] = 0.0
    got = edges_to_dimensions(edges)
    expect = np.array([triclinic_box(*e) for e in edges])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expect)
    mixed = edges.copy()
    mixed[1] = triclinic_vectors(np.array([30, 31, 29, 70, 80, 65], np.float32))
    with_tric = edges_to_dimensions(mixed)
    np.testing.assert_array_equal(np.delete(with_tric, 1, axis=0), np.delete(got, 1, axis=0))
    np.testing.assert_allclose(with_tric[1], triclinic_box(*mixed[1]), rtol=1e-6)
