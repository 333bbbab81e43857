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
        # Scalar accumulators stay in registers (array += in the loop went through memory, 4x slower);
        # the order of the sums is unchanged, so the results are the same bits.
        c0 = c1 = c2 = 0.0
        for a in range(n_atoms):
            c0 += w[a] * x[f, a, 0]
            c1 += w[a] * x[f, a, 1]
            c2 += w[a] * x[f, a, 2]
        com[f, 0], com[f, 1], com[f, 2] = c0, c1, c2
        h00 = h01 = h02 = h10 = h11 = h12 = h20 = h21 = h22 = e = 0.0
        for a in range(n_atoms):
            x0 = x[f, a, 0] - c0
            x1 = x[f, a, 1] - c1
            x2 = x[f, a, 2] - c2
            wa = w[a]
            e += wa * x0 * x0
            h00 += wa * x0 * yc[a, 0]
            h01 += wa * x0 * yc[a, 1]
            h02 += wa * x0 * yc[a, 2]
            e += wa * x1 * x1
            h10 += wa * x1 * yc[a, 0]
            h11 += wa * x1 * yc[a, 1]
            h12 += wa * x1 * yc[a, 2]
            e += wa * x2 * x2
            h20 += wa * x2 * yc[a, 0]
            h21 += wa * x2 * yc[a, 1]
            h22 += wa * x2 * yc[a, 2]
        e0[f] = e
        h[f, 0, 0], h[f, 0, 1], h[f, 0, 2] = h00, h01, h02
        h[f, 1, 0], h[f, 1, 1], h[f, 1, 2] = h10, h11, h12
        h[f, 2, 0], h[f, 2, 1], h[f, 2, 2] = h20, h21, h22
    return com, h, e0


@njit(f"float64[::1]({_F32_3D}, float64[:, :, ::1], float64[:, ::1], float64[::1], float64[:, ::1], float64[::1])",
      cache=True, nogil=True)
def moved_rmsd(x, rot, x_com, y_com, ref, w):
    """Weighted RMSD to ``ref`` of atoms moved by each frame's fit: (x - x_com) @ rot + y_com.

    ``sqrt(sum_a w_a |d_a|^2 / sum_a w_a)``; all-ones weights give the plain RMSD.
    """
    n_frames, n_atoms = x.shape[0], x.shape[1]
    w_sum = 0.0
    for a in range(n_atoms):
        w_sum += w[a]
    out = np.zeros(n_frames)
    for f in range(n_frames):
        acc = 0.0
        for a in range(n_atoms):
            for j in range(3):
                m = y_com[j]
                for i in range(3):
                    m += (x[f, a, i] - x_com[f, i]) * rot[f, i, j]
                d = m - ref[a, j]
                acc += w[a] * d * d
        out[f] = np.sqrt(acc / w_sum)
    return out
