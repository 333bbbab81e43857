"""Optimal superposition RMSD, batched over the frames of a block.

RMSD alone: one compiled pass per frame accumulates the centre, norm and covariance with the prepared
reference, and QCP (Theobald's quaternion characteristic polynomial, as MDAnalysis and MDTraj) gives the
largest eigenvalue by Newton's method: no SVD, no second pass over the atoms (``_superpose.qcp_rmsd``).

With the rotation, batched Kabsch: each frame's weighted covariance ``H_f = Xc_f^T W Yc`` is accumulated by
a compiled loop, then one stacked SVD decomposes all of them; the RMSD follows from the singular values
(Coutsias et al. 2004) and ``R_f = U diag(1, 1, d) V^T`` maps centred mobile rows onto the reference
(``Xc @ R ~ Yc``), the convention of MDAnalysis's QCP rotation.

Everything is float64, and every frame is summed in the same fixed order by the compiled loops, so results
are bit-identical for any split of the trajectory (NumPy's matmul/einsum pick kernels by array shape,
which changes the last bit).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _superpose


def normalized_weights(weights: np.ndarray | None, n_atoms: int) -> np.ndarray:
    """Weights summing to 1 (uniform if None)."""
    if weights is None:
        return np.full(n_atoms, 1.0 / n_atoms)
    w = np.asarray(weights, dtype=np.float64)
    return w / w.sum()


def _frames32(x) -> np.ndarray:
    """(F, N, 3) native float32 with each frame C-contiguous: as given when it is, else one converted copy."""
    x = np.asarray(x)
    if x.ndim != 3 or x.shape[2] != 3:
        raise ValueError(f"coordinates must be (frames, atoms, 3), got shape {x.shape}")
    if x.dtype == np.float32 and x.dtype.isnative and x.strides[2] == 4 and (x.shape[1] < 2 or x.strides[1] == 12):
        return x
    return np.ascontiguousarray(x, dtype=np.float32)


def _f64(a, ndim: int) -> np.ndarray:
    """Native float64, C-contiguous (converted once if not)."""
    a = np.ascontiguousarray(a, dtype=np.float64)
    if a.ndim != ndim:
        raise ValueError(f"expected a {ndim}-dimensional array, got shape {a.shape}")
    return a


@dataclass(frozen=True)
class Reference:
    """A reference structure made ready for :func:`superpose_rmsd` once, not per block (its centring and
    norm cost several times the kernel's work for one frame)."""

    weights: np.ndarray    # (N,) summing to 1
    com: np.ndarray        # (3,) weighted centre
    centred: np.ndarray    # (N, 3) float64, C-contiguous
    grouped: np.ndarray    # (ceil(N / 4), 3, 4) the same in groups of 4 atoms, zero-padded (the QCP pass's layout)
    norm: float            # sum_a w_a |y_a - com|^2
    wsum: np.ndarray       # (3,) sum_a w_a (y_a - com): zero up to rounding
    uniform: bool          # all weights 1/N

    @classmethod
    def of(cls, reference: np.ndarray, weights: np.ndarray | None = None,
           centre_weights: np.ndarray | None = None) -> Reference:
        """Prepare ``reference`` for fits weighted by ``weights``; ``centre_weights`` (default: ``weights``)
        place its centre (MDAnalysis's RMSD centres it with the *reference's* masses)."""
        y = np.asarray(reference, dtype=np.float64)
        w = normalized_weights(weights, y.shape[0])
        wc = w if centre_weights is None else normalized_weights(centre_weights, y.shape[0])
        com = (wc[:, None] * y).sum(axis=0)
        yc = np.ascontiguousarray(y - com)
        uniform = weights is None or bool(np.all(w == w[0]))
        groups = np.zeros((-(-len(yc) // 4) * 4, 3))
        groups[:len(yc)] = yc
        groups = np.ascontiguousarray(groups.reshape(-1, 4, 3).transpose(0, 2, 1))
        return cls(w, com, yc, groups, float((w * (yc * yc).sum(axis=1)).sum()), w @ yc, uniform)


def superpose_rmsd(mobile: np.ndarray, reference: np.ndarray | Reference, weights: np.ndarray | None = None,
                   want_rotation: bool = False):
    """(F,) float64 RMSD of every frame of ``mobile`` (F, N, 3) to ``reference`` ((N, 3), or a
    :class:`Reference` prepared once) after optimal superposition weighted by ``weights`` (N,) (ignored for
    a prepared Reference).  With ``want_rotation``, also the rotations (F, 3, 3) and centres (F, 3) and (3,)
    that move other atoms: ``(rmsd, rotation, mobile_com, ref_com)``."""
    ref = reference if isinstance(reference, Reference) else Reference.of(reference, weights)
    if not want_rotation:   # QCP: no rotation needed, no SVD
        x = _frames32(mobile)
        if x.shape[1] != len(ref.weights):
            raise ValueError(f"{x.shape[1]} mobile atoms for a reference of {len(ref.weights)}")
        return _superpose.qcp_rmsd(x, ref.weights, ref.grouped, ref.wsum, ref.norm, ref.uniform)
    x = np.ascontiguousarray(mobile, dtype=np.float32)
    x_com, h, e0 = _superpose.covariance(x, ref.weights, ref.centred)
    u, s, vt = np.linalg.svd(h)
    d = np.sign(np.linalg.det(u) * np.linalg.det(vt))
    d[d == 0] = 1.0
    msd = e0 + ref.norm - 2.0 * (s[:, 0] + s[:, 1] + d * s[:, 2])
    rmsd = np.sqrt(np.maximum(msd, 0.0))
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
    w = np.ones(x.shape[1]) if weights is None else _f64(weights, 1)
    return _superpose.moved_rmsd(x, _f64(rotation, 3), _f64(mobile_com, 2), _f64(ref_com, 1), _f64(reference, 2), w)
