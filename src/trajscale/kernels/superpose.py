"""Optimal superposition RMSD, batched over the frames of a block.

Batched Kabsch: for every frame f, the weighted covariance ``H_f = Xc_f^T W Yc``
(3x3) is decomposed by one stacked SVD call; the RMSD follows from the singular
values (Coutsias et al. 2004) and the rotation ``R_f = U diag(1, 1, d) V^T``
maps centred mobile rows onto the reference (``Xc @ R ~ Yc``), the same
convention as MDAnalysis's QCP rotation.  Everything is float64; each frame's
numbers do not depend on which other frames share its block.
"""

from __future__ import annotations

import numpy as np


def normalized_weights(weights: np.ndarray | None, n_atoms: int) -> np.ndarray:
    """Weights summing to 1 (uniform if None)."""
    if weights is None:
        return np.full(n_atoms, 1.0 / n_atoms)
    w = np.asarray(weights, dtype=np.float64)
    return w / w.sum()


def center(coords: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted centres of (F, N, 3) coordinates -> (F, 3); w sums to 1."""
    return np.matmul(w, coords)


def superpose_rmsd(mobile: np.ndarray, reference: np.ndarray, weights: np.ndarray | None = None,
                   want_rotation: bool = False):
    """RMSD of every frame of ``mobile`` to ``reference`` after optimal superposition.

    Parameters
    ----------
    mobile
        (F, N, 3) coordinates.
    reference
        (N, 3) coordinates.
    weights
        (N,) weights (e.g. masses) or None.
    want_rotation
        Also return the rotations and centres needed to move other atoms.

    Returns
    -------
    rmsd : (F,) float64
    (rotation (F, 3, 3), mobile_com (F, 3), ref_com (3,)) if ``want_rotation``
    """
    x = np.asarray(mobile, dtype=np.float64)
    y = np.asarray(reference, dtype=np.float64)
    n = y.shape[0]
    w = normalized_weights(weights, n)
    x_com = center(x, w)
    y_com = w @ y
    xc = x - x_com[:, None, :]
    yc = y - y_com
    h = np.matmul(np.swapaxes(xc, 1, 2) * w, yc)          # (F, 3, 3)
    u, s, vt = np.linalg.svd(h)
    d = np.sign(np.linalg.det(u) * np.linalg.det(vt))
    d[d == 0] = 1.0
    e0 = np.matmul(np.einsum("fnk,fnk->fn", xc, xc), w) + float(w @ np.einsum("nk,nk->n", yc, yc))
    msd = e0 - 2.0 * (s[:, 0] + s[:, 1] + d * s[:, 2])
    rmsd = np.sqrt(np.maximum(msd, 0.0))
    if not want_rotation:
        return rmsd
    u[:, :, 2] *= d[:, None]
    return rmsd, np.matmul(u, vt), x_com, y_com


def rmsd_after_transform(mobile: np.ndarray, reference: np.ndarray, rotation: np.ndarray,
                         mobile_com: np.ndarray, ref_com: np.ndarray) -> np.ndarray:
    """RMSD of (F, M, 3) atoms moved by a fit done on other atoms (no refit)."""
    x = np.asarray(mobile, dtype=np.float64)
    moved = np.matmul(x - mobile_com[:, None, :], rotation) + ref_com
    diff = moved - np.asarray(reference, dtype=np.float64)
    return np.sqrt(np.einsum("fmk,fmk->f", diff, diff) / x.shape[1])
