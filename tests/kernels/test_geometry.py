"""Batched distance kernels against MDAnalysis.lib.distances on random boxes (no box, orthorhombic, triclinic)."""

from __future__ import annotations

import numpy as np
import pytest
from MDAnalysis.lib.distances import calc_bonds, distance_array
from MDAnalysis.lib.mdamath import triclinic_vectors as mda_vectors

from trajscale.kernels import geometry


def boxes(rng, n):
    out = np.zeros((n, 6), np.float32)
    out[:, :3] = rng.uniform(20, 40, (n, 3))
    out[:, 3:] = rng.uniform(50, 120, (n, 3))
    out[0] = 0.0                                   # a frame without a box
    out[1, 3:] = 90.0                              # an orthorhombic one
    out[2] = [80.017, 80.017, 80.017, 60, 60, 90]  # rhombic dodecahedron (the AdK water box)
    return out


def test_distances_equal_mdanalysis():
    rng = np.random.default_rng(7)
    dims = boxes(rng, 6)
    a = rng.uniform(-50, 90, (6, 17, 3)).astype(np.float32)
    b = rng.uniform(-50, 90, (6, 23, 3)).astype(np.float32)
    arrays = geometry.distance_arrays(a, b, dims)
    pairs = geometry.pair_distances(a, b[:, :17], dims)
    for f in range(6):
        box = None if not dims[f].any() else dims[f]
        np.testing.assert_allclose(arrays[f], distance_array(a[f], b[f], box=box), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(pairs[f], calc_bonds(a[f], b[f, :17], box=box), rtol=1e-5, atol=1e-4)


def test_indexed_pair_distances_equal_numpy_bit_for_bit_and_mdanalysis():
    """The compiled indexed pairs (orthorhombic boxes and none): NumPy float64's minimum image to the bit, as the
    analyses' features were before; a block with a triclinic frame: MDAnalysis's ``calc_bonds``."""
    rng = np.random.default_rng(11)
    x = rng.uniform(-40, 120, (4, 300, 3)).astype(np.float32)
    pa, pb = rng.integers(0, 300, 5000), rng.integers(0, 300, 5000)
    dims = np.zeros((4, 6), np.float32)
    dims[1:, :3] = rng.uniform(15, 60, (3, 3))
    dims[1:, 3:] = 90.0                            # frame 0 without a box, the others orthorhombic
    for box in (dims, None):
        d = x[:, pa].astype(np.float64) - x[:, pb].astype(np.float64)
        if box is not None:
            lengths = box[1:, None, :3].astype(np.float64)
            d[1:] -= lengths * np.round(d[1:] / lengths)
        want = np.sqrt((d * d).sum(axis=-1))
        got = geometry.indexed_pair_distances(x, pa, pb, box)
        assert got.dtype == np.float64 and np.array_equal(got, want)
    tric = boxes(rng, 4)
    got = geometry.indexed_pair_distances(x, pa, pb, tric)
    for f in range(4):
        np.testing.assert_allclose(got[f], calc_bonds(x[f, pa], x[f, pb], box=tric[f] if tric[f].any() else None),
                                   rtol=1e-5, atol=1e-4)
    with pytest.raises(IndexError):
        geometry.indexed_pair_distances(x, pa, np.array([*pb[:-1], 300]), dims)


def test_right_angled_boxes_are_told_as_the_box_vectors_tell_them():
    """A block whose every box is right-angled makes no box vectors: each frame is boxed (its positive edges, the
    last one finite) exactly where the box vectors have a cell, so its distances are, to the bit, those of the same
    frames in a block that a triclinic frame sends through the box vectors."""
    rng = np.random.default_rng(5)
    edges = [[30, 40, 50], [0, 40, 50], [30, -1, 50], [30, 40, np.inf], [np.inf, 40, 50], [30, np.nan, 50], [0, 0, 0]]
    dims = np.array([[*e, 90, 90, 90] for e in edges], np.float32)
    both = np.concatenate([dims, [[80.017, 80.017, 80.017, 60, 60, 90]]]).astype(np.float32)
    a, b = (rng.uniform(-50, 90, (len(both), 9, 3)).astype(np.float32) for _ in range(2))
    with np.errstate(invalid="ignore"):
        for kernel in (geometry.pair_distances, geometry.distance_arrays):
            right, general = kernel(a[:-1], b[:-1], dims), kernel(a, b, both)[:-1]
            assert right.tobytes() == general.tobytes()


def test_triclinic_vectors_equal_mdanalysis():
    rng = np.random.default_rng(3)
    dims = boxes(rng, 50)
    ours = geometry.triclinic_vectors(dims)
    for f in range(50):
        np.testing.assert_allclose(ours[f], mda_vectors(dims[f]), rtol=1e-5, atol=1e-4)


def test_radius_of_gyration_and_moments_equal_mdanalysis_and_numpy():
    """The compiled kernels (float32 read as is) against MDAnalysis's radius_of_gyration and float64 NumPy."""
    import MDAnalysis as mda

    rng = np.random.default_rng(9)
    x = rng.uniform(-40, 60, (7, 50, 3)).astype(np.float32)
    masses = rng.uniform(1, 32, 50)
    u = mda.Universe.empty(50, trajectory=True)
    u.add_TopologyAttr("masses", masses)
    ref = []
    for f in range(7):
        u.atoms.positions = x[f]
        ref.append(u.atoms.radius_of_gyration())
    np.testing.assert_allclose(geometry.radius_of_gyration(x, masses), ref, rtol=1e-6)


def test_geometry_kernels_take_float64_non_contiguous_and_big_endian_arrays():
    """Converted once by the wrappers: the same numbers as native contiguous input (float64 read as float64)."""
    rng = np.random.default_rng(11)
    x = rng.uniform(-40, 60, (6, 40, 3))
    masses = rng.uniform(1, 32, 40)
    dims = boxes(rng, 6)
    want = (geometry.radius_of_gyration(x, masses),
            geometry.distance_arrays(x, x[:, :9], dims), geometry.pair_distances(x, x[:, ::-1], dims))
    wide = np.zeros((6, 40, 5))
    wide[..., 1:4] = x
    cases = {"big-endian": x.astype(">f8"), "strided": wide[..., 1:4], "Fortran": np.asfortranarray(x)}
    for name, arr in cases.items():
        got = (geometry.radius_of_gyration(arr, masses.astype(">f8")),
               geometry.distance_arrays(arr, arr[:, :9], dims), geometry.pair_distances(arr, arr[:, ::-1], dims))
        for g, w in zip(got, want, strict=False):
            assert np.array_equal(g, w), name
    ints = np.rint(x).astype(np.int32)   # any other dtype: float64
    assert np.array_equal(geometry.radius_of_gyration(ints, masses), geometry.radius_of_gyration(np.rint(x), masses))
    # float32 is read as float32 (not widened first), which the float64 reference matches to float32 rounding
    np.testing.assert_allclose(geometry.radius_of_gyration(x.astype(np.float32), masses), want[0], rtol=1e-6)


def test_geometry_kernels_refuse_shapes_they_cannot_read():
    import pytest

    from trajscale.kernels import _geometry

    with pytest.raises(ValueError, match="masses for coordinates"):
        _geometry.radius_of_gyration(np.zeros((2, 5, 3)), np.ones(4))
    with pytest.raises(TypeError, match="No matching signature"):   # float32 or float64 only
        _geometry.radius_of_gyration(np.zeros((2, 5, 3), np.int64), np.ones(5))
    with pytest.raises(ValueError, match="Big-endian"):
        _geometry.radius_of_gyration(np.zeros((2, 5, 3), ">f8"), np.ones(5))
