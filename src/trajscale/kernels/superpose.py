"""Optimal superposition RMSD, batched over the frames of a block.

RMSD alone (the common case): one compiled pass per frame accumulates the
centre, norm and covariance with the prepared reference, and QCP (Theobald's
quaternion characteristic polynomial, as MDAnalysis and MDTraj) gives the
largest eigenvalue by Newton's method: no SVD, no second pass over the atoms
(``_numba_superpose.qcp_rmsd``).

With the rotation (group selections moved by the fit), batched Kabsch: for every frame f, the weighted covariance ``H_f = Xc_f^T W Yc``
(3x3) is accumulated by a compiled loop, then one stacked SVD call decomposes
all of them; the RMSD follows from the singular values (Coutsias et al. 2004)
and the rotation ``R_f = U diag(1, 1, d) V^T`` maps centred mobile rows onto
the reference (``Xc @ R ~ Yc``), the convention of MDAnalysis's QCP rotation.

Everything is float64, and every frame is summed in the same fixed order by
numba loops, so a frame's numbers do not depend on which other frames share
its block: results are bit-identical for any split of the trajectory.
(NumPy's matmul/einsum pick kernels by array shape, which changes the last
bit.)  Without numba a NumPy fallback gives the same values to ~1e-15.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


def normalized_weights(weights: np.ndarray | None, n_atoms: int) -> np.ndarray:
    """Weights summing to 1 (uniform if None)."""
    if weights is None:
        return np.full(n_atoms, 1.0 / n_atoms)
    w = np.asarray(weights, dtype=np.float64)
    return w / w.sum()


@functools.cache
def _compiled():
    """The numba kernels (loaded from their on-disk cache), or None without numba."""
    try:
        from . import _numba_superpose as k
    except ImportError:
        return None
    return k.covariance, k.moved_rmsd, k.qcp_rmsd


def preload_kernels() -> bool:
    """Load the compiled kernels now rather than in the first task; False without numba."""
    return _compiled() is not None


def _covariance_numpy(x, w, yc):
    com = np.einsum("n,fnk->fk", w, x)
    xc = x - com[:, None, :]
    return com, np.einsum("fni,nj->fij", xc * w[:, None], yc), np.einsum("fnk,fnk,n->f", xc, xc, w)


@dataclass(frozen=True)
class Reference:
    """A reference structure made ready for :func:`superpose_rmsd` once, not per block.

    (Its centring and norm cost ~3.5 ms per call at 47,681 atoms, ten times the
    kernel's work for one frame.)
    """

    weights: np.ndarray    # (N,) summing to 1
    com: np.ndarray        # (3,) weighted centre
    centred: np.ndarray    # (N, 3) float64, C-contiguous
    norm: float            # sum_a w_a |y_a - com|^2
    wsum: np.ndarray       # (3,) sum_a w_a (y_a - com): zero up to rounding
    uniform: bool          # all weights 1/N

    @classmethod
    def of(cls, reference: np.ndarray, weights: np.ndarray | None = None,
           centre_weights: np.ndarray | None = None) -> Reference:
        """Prepare ``reference`` for fits weighted by ``weights``.

        ``centre_weights`` (default: ``weights``) place its centre: MDAnalysis's RMSD
        centres the reference with the *reference's* masses and weights the fit with
        the trajectory's, which differ by up to ``tol_mass`` per atom.
        """
        y = np.asarray(reference, dtype=np.float64)
        w = normalized_weights(weights, y.shape[0])
        wc = w if centre_weights is None else normalized_weights(centre_weights, y.shape[0])
        com = (wc[:, None] * y).sum(axis=0)
        yc = np.ascontiguousarray(y - com)
        uniform = weights is None or bool(np.all(w == w[0]))
        return cls(w, com, yc, float((w * (yc * yc).sum(axis=1)).sum()), w @ yc, uniform)


def superpose_rmsd(mobile: np.ndarray, reference: np.ndarray | Reference, weights: np.ndarray | None = None,
                   want_rotation: bool = False):
    """RMSD of every frame of ``mobile`` to ``reference`` after optimal superposition.

    Parameters
    ----------
    mobile
        (F, N, 3) coordinates.
    reference
        (N, 3) coordinates, or a :class:`Reference` prepared once.
    weights
        (N,) weights (e.g. masses) or None; ignored for a prepared Reference.
    want_rotation
        Also return the rotations and centres needed to move other atoms.

    Returns
    -------
    rmsd : (F,) float64
    (rotation (F, 3, 3), mobile_com (F, 3), ref_com (3,)) if ``want_rotation``
    """
    ref = reference if isinstance(reference, Reference) else Reference.of(reference, weights)
    x = np.ascontiguousarray(mobile, dtype=np.float32)
    kernels = _compiled()
    if kernels and not want_rotation:   # QCP: no rotation needed, no SVD
        return kernels[2](x, ref.weights, ref.centred, ref.wsum, ref.norm, ref.uniform)
    x_com, h, e0 = (kernels[0] if kernels else _covariance_numpy)(x, ref.weights, ref.centred)
    u, s, vt = np.linalg.svd(h)
    d = np.sign(np.linalg.det(u) * np.linalg.det(vt))
    d[d == 0] = 1.0
    msd = e0 + ref.norm - 2.0 * (s[:, 0] + s[:, 1] + d * s[:, 2])
    rmsd = np.sqrt(np.maximum(msd, 0.0))
    if not want_rotation:
        return rmsd
    u[:, :, 2] *= d[:, None]
    rot = np.einsum("fij,fjk->fik", u, vt)
    return rmsd, rot, x_com, ref.com


def rmsd_after_transform(mobile: np.ndarray, reference: np.ndarray, rotation: np.ndarray,
                         mobile_com: np.ndarray, ref_com: np.ndarray,
                         weights: np.ndarray | None = None) -> np.ndarray:
    """RMSD of (F, M, 3) atoms moved by a fit done on other atoms (no refit).

    With ``weights`` (M,), ``sqrt(sum w |d|^2 / sum w)`` (MDAnalysis's ``rmsd(..., weights)``).
    """
    x = np.ascontiguousarray(mobile, dtype=np.float32)
    ref = np.ascontiguousarray(reference, dtype=np.float64)
    w = np.ones(x.shape[1]) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    kernels = _compiled()
    if kernels:
        return kernels[1](x, np.ascontiguousarray(rotation), np.ascontiguousarray(mobile_com),
                          np.ascontiguousarray(ref_com, dtype=np.float64), ref, w)
    moved = np.einsum("fmi,fij->fmj", x - mobile_com[:, None, :], rotation) + ref_com
    diff = moved - ref
    return np.sqrt(np.einsum("fmk,fmk,m->f", diff, diff, w) / w.sum())
