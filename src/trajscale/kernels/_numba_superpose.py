"""numba loops behind :mod:`trajscale.kernels.superpose` (imported only when numba is installed).

Compiled eagerly for float32 coordinates with ``cache=True``: the first import
compiles and stores machine code beside this file; later imports (worker
processes included) load it in milliseconds.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_F32_3D = "float32[:, :, ::1]"


@njit(f"Tuple((float64[:, ::1], float64[:, :, ::1], float64[::1]))({_F32_3D}, float64[::1], float64[:, ::1])",
      cache=True, nogil=True)
def covariance(x, w, yc):
    """Weighted centres, covariances with the centred reference, and E0 of every frame."""
    n_frames, n_atoms = x.shape[0], x.shape[1]
    com = np.zeros((n_frames, 3))
    h = np.zeros((n_frames, 3, 3))
    e0 = np.zeros(n_frames)
    for f in range(n_frames):
        for a in range(n_atoms):
            for k in range(3):
                com[f, k] += w[a] * x[f, a, k]
        for a in range(n_atoms):
            for i in range(3):
                xi = x[f, a, i] - com[f, i]
                e0[f] += w[a] * xi * xi
                for j in range(3):
                    h[f, i, j] += w[a] * xi * yc[a, j]
    return com, h, e0


@njit(f"float64[::1]({_F32_3D}, float64[:, :, ::1], float64[:, ::1], float64[::1], float64[:, ::1])",
      cache=True, nogil=True)
def moved_rmsd(x, rot, x_com, y_com, ref):
    """RMSD to ``ref`` of atoms moved by each frame's fit: (x - x_com) @ rot + y_com."""
    n_frames, n_atoms = x.shape[0], x.shape[1]
    out = np.zeros(n_frames)
    for f in range(n_frames):
        acc = 0.0
        for a in range(n_atoms):
            for j in range(3):
                m = y_com[j]
                for i in range(3):
                    m += (x[f, a, i] - x_com[f, i]) * rot[f, i, j]
                d = m - ref[a, j]
                acc += d * d
        out[f] = np.sqrt(acc / n_atoms)
    return out
