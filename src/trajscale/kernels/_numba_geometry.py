"""numba kernels for minimum-image distances over whole blocks (imported only where numba is installed).

Coordinates arrive already wrapped into the primary cell (MDAnalysis's convention, see
:mod:`trajscale.kernels.geometry`); each kernel loops over frames, pairs and the 27
neighbouring images in compiled code.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _image_shifts(h):
    """(F, 27, 3): the 27 lattice vectors ix a + iy b + iz c (ix, iy, iz in -1, 0, 1) of each box."""
    out = np.empty((h.shape[0], 27, 3))
    for f in range(h.shape[0]):
        s = 0
        for ix in range(-1, 2):
            for iy in range(-1, 2):
                for iz in range(-1, 2):
                    for k in range(3):
                        out[f, s, k] = ix * h[f, 0, k] + iy * h[f, 1, k] + iz * h[f, 2, k]
                    s += 1
    return out


@njit(cache=True, inline="always")
def _shortest(dx, dy, dz, h, safe2, shifts):
    """Length of the shortest of the 27 images of (dx, dy, dz) (MDAnalysis's 27: wrapped differences).

    Shortcut: a vector shorter than half the box's smallest perpendicular width is the
    shortest of all its images (any other differs by a lattice vector at least that
    long), so when (dx, dy, dz) or its image nearest in box coordinates is below
    ``safe2`` (that half width squared, less a margin), it is the one the 27-image
    loop would pick (its box coordinates differ from the wrapped difference's by
    -1, 0 or 1): return it at once.
    """
    d2 = dx * dx + dy * dy + dz * dz
    if d2 < safe2:
        return np.sqrt(d2)
    # The image nearest in box coordinates (rows c, b, a of the lower-triangular box) is,
    # when short enough, the same shortest image, for pairs split by the box's faces.
    n = np.rint(dz / h[2, 2])
    rz, ry, rx = dz - n * h[2, 2], dy - n * h[2, 1], dx - n * h[2, 0]
    n = np.rint(ry / h[1, 1])
    ry, rx = ry - n * h[1, 1], rx - n * h[1, 0]
    rx -= np.rint(rx / h[0, 0]) * h[0, 0]
    d2 = rx * rx + ry * ry + rz * rz
    if d2 < safe2:
        return np.sqrt(d2)
    best = np.inf
    for s in range(27):   # all 27 images; one flat loop over precomputed shifts vectorises
        r0 = dx + shifts[s, 0]
        r1 = dy + shifts[s, 1]
        r2 = dz + shifts[s, 2]
        best = min(best, r0 * r0 + r1 * r1 + r2 * r2)
    return np.sqrt(best)


@njit(cache=True)
def triclinic_arrays(a, b, h, safe2):
    """(F, N, M) distances between wrapped ``a`` (F, N, 3) and ``b`` (F, M, 3) in boxes ``h`` (F, 3, 3).

    ``safe2`` (F,): squared half of each box's smallest perpendicular width (see ``_shortest``).
    """
    out = np.empty((a.shape[0], a.shape[1], b.shape[1]))
    shifts = _image_shifts(h)
    for f in range(a.shape[0]):
        for i in range(a.shape[1]):
            for j in range(b.shape[1]):
                out[f, i, j] = _shortest(a[f, i, 0] - b[f, j, 0], a[f, i, 1] - b[f, j, 1],
                                         a[f, i, 2] - b[f, j, 2], h[f], safe2[f], shifts[f])
    return out


@njit(cache=True)
def triclinic_pairs(a, b, h, safe2):
    """(F, N) distances between wrapped row i of ``a`` and row i of ``b`` (F, N, 3) in boxes ``h``."""
    out = np.empty((a.shape[0], a.shape[1]))
    shifts = _image_shifts(h)
    for f in range(a.shape[0]):
        for i in range(a.shape[1]):
            out[f, i] = _shortest(a[f, i, 0] - b[f, i, 0], a[f, i, 1] - b[f, i, 1], a[f, i, 2] - b[f, i, 2], h[f], safe2[f], shifts[f])
    return out


@njit(cache=True)
def radius_of_gyration(x, masses):
    """(F,) mass-weighted radius of gyration of (F, N, 3) coordinates, float64 accumulation, one pass per frame."""
    n_frames, n = x.shape[0], x.shape[1]
    out = np.empty(n_frames)
    total = 0.0
    for i in range(n):
        total += masses[i]
    for f in range(n_frames):
        cx = cy = cz = 0.0
        for i in range(n):
            m = masses[i]
            cx += m * x[f, i, 0]
            cy += m * x[f, i, 1]
            cz += m * x[f, i, 2]
        cx /= total
        cy /= total
        cz /= total
        s = 0.0
        for i in range(n):
            dx = x[f, i, 0] - cx
            dy = x[f, i, 1] - cy
            dz = x[f, i, 2] - cz
            s += masses[i] * (dx * dx + dy * dy + dz * dz)
        out[f] = np.sqrt(s / total)
    return out


@njit(cache=True)
def frame_moments(x):
    """Mean (N, 3) and summed squared deviations (N, 3) over the frames of (F, N, 3), float64, two passes."""
    n_frames, n = x.shape[0], x.shape[1]
    mean = np.zeros((n, 3))
    m2 = np.zeros((n, 3))
    for f in range(n_frames):
        for i in range(n):
            for k in range(3):
                mean[i, k] += x[f, i, k]
    mean /= max(n_frames, 1)
    for f in range(n_frames):
        for i in range(n):
            for k in range(3):
                d = x[f, i, k] - mean[i, k]
                m2[i, k] += d * d
    return mean, m2
