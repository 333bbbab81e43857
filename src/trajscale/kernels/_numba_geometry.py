"""numba kernels for triclinic minimum-image distances (imported only where numba is installed)."""

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
def triclinic_array(a, b, h):
    """(N, M) distances between wrapped rows of ``a`` (N, 3) and ``b`` (M, 3) in box ``h`` (lower triangular)."""
    out = np.empty((a.shape[0], b.shape[0]))
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            out[i, j] = _shortest(a[i, 0] - b[j, 0], a[i, 1] - b[j, 1], a[i, 2] - b[j, 2], h)
    return out


@njit(cache=True)
def triclinic_pairs(a, b, h):
    """(N,) distances between wrapped row i of ``a`` and row i of ``b`` in box ``h``."""
    out = np.empty(a.shape[0])
    for i in range(a.shape[0]):
        out[i] = _shortest(a[i, 0] - b[i, 0], a[i, 1] - b[i, 1], a[i, 2] - b[i, 2], h)
    return out
