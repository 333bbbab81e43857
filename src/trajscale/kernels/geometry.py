"""Geometry batched over the frames of a block: boxes, minimum-image distances, centres.

Every function takes whole blocks ``(F, N, 3)`` and boxes ``(F, 6)`` (MDAnalysis's
``[a, b, c, alpha, beta, gamma]``; all zeros = no box) and works in float64.
Large intermediates are built a few frames at a time (:data:`WORK_BYTES`), so
memory follows the block, not the pair count times the frames.
"""

from __future__ import annotations

import numpy as np

#: Largest float64 intermediate built at once by the distance kernels.
WORK_BYTES = 64 * 1024**2
_IMAGES = np.array([(i, j, k) for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)], dtype=np.float64)


def triclinic_vectors(dims: np.ndarray) -> np.ndarray:
    """(F, 6) box dimensions to (F, 3, 3) row vectors, as ``MDAnalysis.lib.mdamath.triclinic_vectors``.

    Invalid boxes (a length or angle <= 0, or an angle sum that cannot close) give zeros.
    """
    dims = np.asarray(dims, dtype=np.float64).reshape(-1, 6)
    a, b, c = dims[:, 0], dims[:, 1], dims[:, 2]
    ang = dims[:, 3:]
    right = ang == 90.0
    rad = np.radians(ang)
    cos = np.where(right, 0.0, np.cos(rad))
    sin = np.where(right, 1.0, np.sin(rad))
    cos_a, cos_b, cos_g, sin_g = cos[:, 0], cos[:, 1], cos[:, 2], sin[:, 2]
    out = np.zeros((len(dims), 3, 3))
    out[:, 0, 0] = a
    out[:, 1, 0] = b * cos_g
    out[:, 1, 1] = b * sin_g
    out[:, 2, 0] = c * cos_b
    with np.errstate(divide="ignore", invalid="ignore"):
        out[:, 2, 1] = c * (cos_a - cos_b * cos_g) / sin_g
        out[:, 2, 2] = np.sqrt(c * c - out[:, 2, 0] ** 2 - out[:, 2, 1] ** 2)
    ok = (dims[:, :3] > 0).all(axis=1) & (ang > 0).all(axis=1) & (ang < 180).all(axis=1)
    ok &= np.isfinite(out).all(axis=(1, 2)) & (out[:, 2, 2] > 0)
    out[~ok] = 0.0
    ortho = right.all(axis=1) & ok   # exact zeros off the diagonal, as MDAnalysis
    out[ortho] = 0.0
    out[ortho, 0, 0], out[ortho, 1, 1], out[ortho, 2, 2] = a[ortho], b[ortho], c[ortho]
    return out


def box_volume(dims: np.ndarray) -> np.ndarray:
    """(F,) volumes of (F, 6) boxes (0 without a box)."""
    vec = triclinic_vectors(dims)
    return np.abs(np.linalg.det(vec))


def _wrap(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Coordinates (..., 3) moved into the primary cell of box vectors ``h`` (3, 3)."""
    frac = x @ np.linalg.inv(h)
    frac -= np.floor(frac)
    return frac @ h


def _shortest_image(d: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Of the 27 images of each vector in ``d`` (..., 3), the shortest (first one on ties, as MDAnalysis)."""
    best = np.full(d.shape, np.nan)
    best_d2 = np.full(d.shape[:-1], np.inf)
    for shift in _IMAGES @ h:
        cand = d + shift
        d2 = (cand * cand).sum(axis=-1)
        better = d2 < best_d2
        best[better], best_d2[better] = cand[better], d2[better]
    return best


def _differences(a: np.ndarray, b: np.ndarray, dims: np.ndarray | None) -> np.ndarray:
    """Minimum-image ``a - b`` (F, ..., 3) (broadcasting), MDAnalysis's convention box by box.

    Orthorhombic: round each component. Triclinic: both sets moved into the primary
    cell, then the shortest of the 27 neighbouring images of their difference, as
    MDAnalysis's ``calc_distances.h`` does (for boxes that are not reduced this is
    not always the global minimum, and MDAnalysis's answer is the one users compare with).
    """
    if dims is None:
        return np.asarray(a, np.float64) - np.asarray(b, np.float64)
    dims = np.asarray(dims, np.float64).reshape(-1, 6)
    vec = triclinic_vectors(dims)
    has_box = vec[:, 0, 0] > 0
    ortho = has_box & (dims[:, 3:] == 90.0).all(axis=1)
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    if ortho.any():
        L = dims[ortho, :3].reshape((-1,) + (1,) * (d.ndim - 2) + (3,))
        d[ortho] -= L * np.round(d[ortho] / L)
    for f in np.flatnonzero(has_box & ~ortho):   # per triclinic frame; pair arrays are the work
        h = vec[f]
        d[f] = _shortest_image(_wrap(np.asarray(a[f], np.float64), h) - _wrap(np.asarray(b[f], np.float64), h), h)
    return d


def pair_distances(a: np.ndarray, b: np.ndarray, dims: np.ndarray | None = None) -> np.ndarray:
    """(F, N) distances between atom i of ``a`` and atom i of ``b`` (both (F, N, 3)), minimum image if boxed."""
    d = _differences(a, b, dims)
    return np.sqrt((d * d).sum(axis=-1))


def distance_arrays(a: np.ndarray, b: np.ndarray, dims: np.ndarray | None = None) -> np.ndarray:
    """(F, N, M) all distances between ``a`` (F, N, 3) and ``b`` (F, M, 3), minimum image if boxed."""
    n_f, n, m = a.shape[0], a.shape[1], b.shape[1]
    out = np.empty((n_f, n, m))
    step = max(1, WORK_BYTES // max(1, n * m * 3 * 8 * 4))
    for s in range(0, n_f, step):   # a few frames at a time: (k, N, M, 3) intermediates stay bounded
        e = min(n_f, s + step)
        d = _differences(a[s:e, :, None, :], b[s:e, None, :, :], None if dims is None else dims[s:e])
        out[s:e] = np.sqrt((d * d).sum(axis=-1))
    return out


def centre_of_mass(x: np.ndarray, masses: np.ndarray | None = None) -> np.ndarray:
    """(F, 3) weighted centres of (F, N, 3) coordinates (uniform without masses)."""
    w = np.full(x.shape[1], 1.0 / x.shape[1]) if masses is None else np.asarray(masses, np.float64) / np.sum(masses)
    return np.einsum("n,fnk->fk", w, x, dtype=np.float64)


def radius_of_gyration(x: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """(F,) mass-weighted radius of gyration, as ``AtomGroup.radius_of_gyration()`` (no wrapping)."""
    m = np.asarray(masses, np.float64)
    com = centre_of_mass(x, m)
    rc = np.asarray(x, np.float64) - com[:, None, :]
    return np.sqrt(np.einsum("n,fn->f", m, (rc * rc).sum(axis=-1)) / m.sum())


def apply_fit(x: np.ndarray, rotation: np.ndarray, mobile_com: np.ndarray, ref_com: np.ndarray) -> np.ndarray:
    """Move (F, N, 3) coordinates by per-frame fits: ``(x - mobile_com) @ R + ref_com``, float64."""
    xc = np.asarray(x, np.float64) - mobile_com[:, None, :]
    return np.einsum("fni,fij->fnj", xc, rotation) + ref_com
