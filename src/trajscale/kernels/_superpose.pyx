# cython: language_level=3
"""Compiled loops behind :mod:`trajscale.kernels.superpose` (Cython, built ahead of time).

Each kernel takes typed, native-endian arrays (the wrappers in ``superpose.py``
convert once per call) and works on its frames in chunks with the GIL
released, checking for signals (Ctrl-C) between chunks.  Every frame is summed
in a fixed order that depends only on its own atoms, so its numbers are the
same bits whichever frames share its block.
"""

import numpy as np

from libc.math cimport sqrt, isfinite, NAN

from ._chunks cimport Chunks, chunks, next_chunk

cdef extern from "csrc/qcp_sums.h" nogil:
    int ts_simd_level(int wanted)
    void ts_qcp_sums_frames(int level, const char *base, Py_ssize_t fstride, Py_ssize_t nf, const double *y,
                            const double *w, Py_ssize_t n, double *out)
    double ts_qcp_msd(double e0, double sxx, double sxy, double sxz, double syx, double syy, double syz,
                      double szx, double szy, double szz)

#: The vector width the QCP pass uses on this CPU: 0 scalar, 1 SSE2, 2 AVX (same bits in all three).
SIMD_LEVEL = ts_simd_level(2)

def qcp_rmsd(const float[:, :, :] x, const double[::1] w, const double[:, :, ::1] yg, const double[::1] y_wsum,
             double g_ref, bint uniform, int simd=2):
    """RMSD of every frame of ``x`` (F, N, 3) float32 after optimal superposition on a centred reference.

    ``yg`` (ceil(N / 4), 3, 4) is the centred reference in groups of 4 atoms (``yg[g, j, l]``: coordinate j
    of atom 4 g + l, zero past N), ``y_wsum`` its weighted sum (zero up to
    rounding) and ``g_ref`` its weighted norm; ``w`` sums to 1 (``uniform``: all ``1/N``, skipped in
    the loop).  Per frame one pass accumulates the centre, the norm and the covariance with the
    reference (``csrc/qcp_sums.h``); the mobile frame's centring is applied to the sums
    (``H = sum w x yc^T - c (x) sum w yc``, ``G = sum w |x|^2 - |c|^2``), then QCP.  A frame with a
    non-finite coordinate gets NaN.  ``simd`` caps the vector width (0 scalar, 1 SSE2, 2 AVX), for tests.
    """
    cdef Py_ssize_t n_frames = x.shape[0], n = x.shape[1], f, k
    if x.shape[2] != 3 or (n > 1 and x.strides[1] != 12) or x.strides[2] != 4:
        raise ValueError("x must be (frames, atoms, 3) float32 with each frame C-contiguous")
    if w.shape[0] != n or yg.shape[0] != (n + 3) // 4 or yg.shape[1] != 3 or yg.shape[2] != 4 or y_wsum.shape[0] != 3:
        raise ValueError(f"reference of {w.shape[0]} atoms ({yg.shape[0]} groups of 4) for coordinates of {n} atoms")
    if n == 0:
        raise ValueError("no atoms to superpose")
    out = np.empty(n_frames)
    cdef double[::1] o = out
    cdef int level = ts_simd_level(simd)
    cdef const double *wp = NULL if uniform else &w[0]
    cdef const double *yp = &yg[0, 0, 0]
    cdef Py_ssize_t fstride = x.strides[0]
    cdef const char *base = <const char *> &x[0, 0, 0] if n_frames else NULL
    cdef Chunks ch = chunks(n_frames, n)
    cdef double[:, ::1] sums = np.empty((min(ch.step, max(n_frames, 1)), 13))
    cdef double *s
    cdef double scale = 1.0 / n, s0 = y_wsum[0], s1 = y_wsum[1], s2 = y_wsum[2]
    cdef double c0, c1, c2, sxx, sxy, sxz, syx, syy, syz, szx, szy, szz, e0
    while next_chunk(&ch):
        with nogil:
            ts_qcp_sums_frames(level, base + ch.start * fstride, fstride, ch.stop - ch.start, yp, wp, n,
                               &sums[0, 0])
            for f in range(ch.start, ch.stop):
                s = &sums[f - ch.start, 0]
                if uniform:
                    for k in range(13):
                        s[k] *= scale
                c0, c1, c2 = s[0], s[1], s[2]
                # Centre the mobile frame in the sums.
                sxx, sxy, sxz = s[4] - c0 * s0, s[5] - c0 * s1, s[6] - c0 * s2
                syx, syy, syz = s[7] - c1 * s0, s[8] - c1 * s1, s[9] - c1 * s2
                szx, szy, szz = s[10] - c2 * s0, s[11] - c2 * s1, s[12] - c2 * s2
                e0 = 0.5 * ((s[3] - (c0 * c0 + c1 * c1 + c2 * c2)) + g_ref)
                if not isfinite(e0 + sxx + sxy + sxz + syx + syy + syz + szx + szy + szz):
                    o[f] = NAN
                else:
                    o[f] = sqrt(ts_qcp_msd(e0, sxx, sxy, sxz, syx, syy, syz, szx, szy, szz))
    return out


def covariance(const float[:, :, ::1] x, const double[::1] w, const double[:, ::1] yc):
    """Weighted centres (F, 3), covariances with the centred reference (F, 3, 3) and E0 (F,) of every frame.

    Two passes per frame (centre, then centred sums), in atom order.
    """
    cdef Py_ssize_t n_frames = x.shape[0], n = x.shape[1], f, a
    if x.shape[2] != 3 or w.shape[0] != n or yc.shape[0] != n or yc.shape[1] != 3:
        raise ValueError(f"reference of {yc.shape[0]} atoms for coordinates of shape {tuple(x.shape)}")
    com_a = np.zeros((n_frames, 3))
    h_a = np.zeros((n_frames, 3, 3))
    e0_a = np.zeros(n_frames)
    cdef double[:, ::1] com = com_a
    cdef double[:, :, ::1] h = h_a
    cdef double[::1] e0 = e0_a
    cdef double c0, c1, c2, x0, x1, x2, wa, e, y0, y1, y2
    cdef double h00, h01, h02, h10, h11, h12, h20, h21, h22
    cdef Chunks ch = chunks(n_frames, 2 * n)
    while next_chunk(&ch):
        with nogil:
            for f in range(ch.start, ch.stop):
                c0 = c1 = c2 = 0.0
                for a in range(n):
                    c0 += w[a] * x[f, a, 0]
                    c1 += w[a] * x[f, a, 1]
                    c2 += w[a] * x[f, a, 2]
                com[f, 0] = c0
                com[f, 1] = c1
                com[f, 2] = c2
                h00 = h01 = h02 = h10 = h11 = h12 = h20 = h21 = h22 = e = 0.0
                for a in range(n):
                    x0 = x[f, a, 0] - c0
                    x1 = x[f, a, 1] - c1
                    x2 = x[f, a, 2] - c2
                    wa = w[a]
                    y0 = yc[a, 0]
                    y1 = yc[a, 1]
                    y2 = yc[a, 2]
                    e += wa * x0 * x0
                    h00 += wa * x0 * y0
                    h01 += wa * x0 * y1
                    h02 += wa * x0 * y2
                    e += wa * x1 * x1
                    h10 += wa * x1 * y0
                    h11 += wa * x1 * y1
                    h12 += wa * x1 * y2
                    e += wa * x2 * x2
                    h20 += wa * x2 * y0
                    h21 += wa * x2 * y1
                    h22 += wa * x2 * y2
                e0[f] = e
                h[f, 0, 0] = h00
                h[f, 0, 1] = h01
                h[f, 0, 2] = h02
                h[f, 1, 0] = h10
                h[f, 1, 1] = h11
                h[f, 1, 2] = h12
                h[f, 2, 0] = h20
                h[f, 2, 1] = h21
                h[f, 2, 2] = h22
    return com_a, h_a, e0_a


def moved_rmsd(const float[:, :, ::1] x, const double[:, :, ::1] rot, const double[:, ::1] x_com,
               const double[::1] y_com, const double[:, ::1] ref, const double[::1] w):
    """Weighted RMSD to ``ref`` (M, 3) of atoms moved by each frame's fit: (x - x_com) @ rot + y_com.

    ``sqrt(sum_a w_a |d_a|^2 / sum_a w_a)``; all-ones weights give the plain RMSD.
    """
    cdef Py_ssize_t n_frames = x.shape[0], n = x.shape[1], f, a, i, j
    if (x.shape[2] != 3 or ref.shape[0] != n or ref.shape[1] != 3 or w.shape[0] != n
            or rot.shape[0] != n_frames or x_com.shape[0] != n_frames or y_com.shape[0] != 3):
        raise ValueError(f"reference of {ref.shape[0]} atoms / {rot.shape[0]} fits for coordinates "
                         f"of shape {tuple(x.shape)}")
    cdef double w_sum = 0.0, acc, m, d
    for a in range(n):
        w_sum += w[a]
    out = np.zeros(n_frames)
    cdef double[::1] o = out
    cdef Chunks ch = chunks(n_frames, n)
    while next_chunk(&ch):
        with nogil:
            for f in range(ch.start, ch.stop):
                acc = 0.0
                for a in range(n):
                    for j in range(3):
                        m = y_com[j]
                        for i in range(3):
                            m += (x[f, a, i] - x_com[f, i]) * rot[f, i, j]
                        d = m - ref[a, j]
                        acc += w[a] * d * d
                o[f] = sqrt(acc / w_sum)
    return out
