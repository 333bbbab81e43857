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


@pytest.mark.parametrize("compiled", [True, False])
def test_distances_equal_mdanalysis(monkeypatch, compiled):
    rng = np.random.default_rng(7)
    if not compiled:
        monkeypatch.setattr(geometry, "_numba", lambda: None)
    dims = boxes(rng, 6)
    a = rng.uniform(-50, 90, (6, 17, 3)).astype(np.float32)
    b = rng.uniform(-50, 90, (6, 23, 3)).astype(np.float32)
    arrays = geometry.distance_arrays(a, b, dims)
    pairs = geometry.pair_distances(a, b[:, :17], dims)
    for f in range(6):
        box = None if not dims[f].any() else dims[f]
        np.testing.assert_allclose(arrays[f], distance_array(a[f], b[f], box=box), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(pairs[f], calc_bonds(a[f], b[f, :17], box=box), rtol=1e-5, atol=1e-4)


def test_triclinic_vectors_equal_mdanalysis():
    rng = np.random.default_rng(3)
    dims = boxes(rng, 50)
    ours = geometry.triclinic_vectors(dims)
    for f in range(50):
        np.testing.assert_allclose(ours[f], mda_vectors(dims[f]), rtol=1e-5, atol=1e-4)
