"""The QCP RMSD kernel against MDAnalysis's qcprot and the Kabsch (SVD) path, on real AdK frames."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

from trajscale.kernels import superpose
from trajscale.kernels.superpose import Reference, superpose_rmsd

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def frames(adk_vacuum):
    """(98 + 20, 3341, 3) float32: the DCD's frames, then 20 randomly moved copies of frame 10."""
    u = mda.Universe(*adk_vacuum)
    x = np.array([ts.positions.copy() for ts in u.trajectory], dtype=np.float32)
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.normal(size=(20, 3, 3)))
    q *= np.sign(np.linalg.det(q))[:, None, None]   # proper rotations
    moved = np.einsum("nk,fjk->fnj", x[10], q) + rng.uniform(-30, 30, (20, 1, 3))
    return np.concatenate([x, moved.astype(np.float32)]), u.atoms.masses.astype(np.float64)


@pytest.mark.parametrize("select", [slice(0, 214), slice(None)])
@pytest.mark.parametrize("weighted", [False, True])
def test_qcp_equals_mdanalysis(frames, select, weighted):
    x, masses = frames
    x = np.ascontiguousarray(x[:, select])
    w = masses[select] if weighted else None
    ref = x[0].astype(np.float64)
    ours = superpose_rmsd(x, ref, w)
    theirs = np.array([rms.rmsd(f.astype(np.float64), ref, weights=w, center=True, superposition=True)
                       for f in x])
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)
    # the Kabsch path (SVD), which computes the rotation too, agrees far below that (in MSD:
    # at RMSD 0 the square root turns rounding of 1e-13 A^2 into 3e-7 A)
    kabsch = superpose_rmsd(x, ref, w, want_rotation=True)[0]
    np.testing.assert_allclose(ours**2, kabsch**2, rtol=0, atol=1e-10)
    assert ours[0] < 1e-6   # the reference itself


def test_qcp_rigid_motion_is_zero(frames):
    x, _ = frames
    ours = superpose_rmsd(x[98:], x[10].astype(np.float64))
    assert np.abs(ours).max() < 2e-4   # float32 rounding of the moved copies only


def test_qcp_same_bits_for_any_split(frames):
    x, _ = frames
    ref = Reference.of(x[0])
    whole = superpose_rmsd(x, ref)
    parts = np.concatenate([superpose_rmsd(x[a:b], ref) for a, b in [(0, 7), (7, 50), (50, len(x))]])
    assert np.array_equal(whole, parts)


def test_qcp_non_finite_frames_give_nan(frames):
    x, _ = frames
    x = x[:6].copy()
    x[2, 5, 1] = np.nan
    x[4, 0, 0] = np.inf
    out = superpose_rmsd(x, x[0].astype(np.float64))
    assert np.isnan(out[[2, 4]]).all() and np.isfinite(out[[0, 1, 3, 5]]).all()
    np.testing.assert_array_equal(out[[0, 1, 3, 5]], superpose_rmsd(x[[0, 1, 3, 5]], x[0].astype(np.float64)))


def test_numpy_fallback_matches(frames, monkeypatch):
    x, _ = frames
    ref = x[0].astype(np.float64)
    compiled = superpose_rmsd(x[:20], ref)
    monkeypatch.setattr(superpose, "_compiled", lambda: None)
    np.testing.assert_allclose(superpose_rmsd(x[:20], ref) ** 2, compiled**2, rtol=0, atol=1e-10)
