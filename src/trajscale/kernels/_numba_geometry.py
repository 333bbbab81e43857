"""numba kernels for minimum-image distances over whole blocks (imported only where numba is installed).

Coordinates arrive already wrapped into the primary cell (MDAnalysis's convention, see
:mod:`trajscale.kernels.geometry`); each kernel loops over frames, pairs and the 27
neighbouring images in compiled code.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _shortest(dx, dy, dz, h):
    """Length of the shortest of the 27 images of (dx, dy, dz), MDAnalysis's loop order (first on ties)."""
    best = np.inf
    for ix in range(-1, 2):
        rx = dx + h[0, 0] * ix
        for iy in range(-1, 2):
            ry0 = rx + h[1, 0] * iy
            ry1 = dy + h[1, 1] * iy
            for iz in range(-1, 2):
                r0 = ry0 + h[2, 0] * iz
                r1 = ry1 + h[2, 1] * iz
                r2 = dz + h[2, 2] * iz
                d2 = r0 * r0 + r1 * r1 + r2 * r2
                if d2 < best:
                    best = d2
    return np.sqrt(best)


@njit(cache=True)
def triclinic_arrays(a, b, h):
    """(F, N, M) distances between wrapped ``a`` (F, N, 3) and ``b`` (F, M, 3) in boxes ``h`` (F, 3, 3)."""
    out = np.empty((a.shape[0], a.shape[1], b.shape[1]))
    for f in range(a.shape[0]):
        for i in range(a.shape[1]):
            for j in range(b.shape[1]):
                out[f, i, j] = _shortest(a[f, i, 0] - b[f, j, 0], a[f, i, 1] - b[f, j, 1],
                                         a[f, i, 2] - b[f, j, 2], h[f])
    return out


@njit(cache=True)
def triclinic_pairs(a, b, h):
    """(F, N) distances between wrapped row i of ``a`` and row i of ``b`` (F, N, 3) in boxes ``h``."""
    out = np.empty((a.shape[0], a.shape[1]))
    for f in range(a.shape[0]):
        for i in range(a.shape[1]):
            out[f, i] = _shortest(a[f, i, 0] - b[f, i, 0], a[f, i, 1] - b[f, i, 1], a[f, i, 2] - b[f, i, 2], h[f])
    return out
