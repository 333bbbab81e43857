# cython: language_level=3
"""Exact sums of coordinates and their squares over frames, as fixed-point integers.

Each value ``d = x - shift`` is rounded once to a multiple of 2**-40 Å and each square
``d*d`` once to a multiple of 2**-40 Å²; the integers are added in int64 words.  Integer
addition is exact and associative, so partial sums over any split of the frames, added in
any order, give the same bits: that is what makes RMSF and the average structure the same
on every executor and task count.  A value is held as ``hi * 2**32 + lo`` (``lo`` in
[0, 2**32]) so that two int64 words hold more than 2**31 frames without overflow.
"""

from libc.math cimport fabs
from libc.stdint cimport int64_t
cimport cython

from ._chunks cimport Chunks, frame_chunks, next_chunk

ctypedef fused real:
    float
    double

#: |x - shift| must stay below this (Å): keeps d * 2**40 and d*d * 2**8 inside int64 words.
LIMIT = 2048.0
cdef double _LIMIT = 2048.0

cdef Py_ssize_t CHUNK = 64   # frames between checks for Ctrl-C


cdef extern from "csrc/fixed_sums.h" nogil:
    int ts_fixed_level(int wanted)
    int ts_rows_f32(int level, const float *x, int64_t fstride, int64_t nf, const double *shift, int64_t *s_hi,
                    int64_t *s_lo, int64_t *q_hi, int64_t *q_lo, int64_t n, int squares, double limit)
    int ts_rows_f64(int level, const double *x, int64_t fstride, int64_t nf, const double *shift, int64_t *s_hi,
                    int64_t *s_lo, int64_t *q_hi, int64_t *q_lo, int64_t n, int squares, double limit)

#: The vector width of the sums on this CPU: 0 the baseline (SSE2 on x86-64), 2 AVX2, 3 AVX-512 (same words in all).
SIMD_LEVEL = ts_fixed_level(3)

cdef enum:
    TILE = 128   # atoms whose accumulators stay in L1 cache while the frames pass


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _first_bad(const real[:, :, ::1] x, const double[:, ::1] shift, Py_ssize_t f0,
                           Py_ssize_t f1) noexcept nogil:
    """The first of frames [f0, f1) with a value that is not finite or too far from ``shift`` (or f1)."""
    cdef Py_ssize_t f, a
    cdef int k
    for f in range(f0, f1):
        for a in range(x.shape[1]):
            for k in range(3):
                if not fabs(<double>x[f, a, k] - shift[a, k]) < _LIMIT:
                    return f
    return f1


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _accumulate(const real[:, :, ::1] x, const double[:, ::1] shift, int64_t[:, :, ::1] out,
                            bint squares, Py_ssize_t f0, Py_ssize_t f1, int level) noexcept nogil:
    """Add frames [f0, f1) (f0 < f1) into ``out`` (4, N, 3): sum hi, sum lo, square hi, square lo.
    Returns -1, or the first frame with a value that is not finite or too far from ``shift``
    (``out`` then holds partial sums: the caller raises).  Atoms go in tiles so that their
    accumulators stay in L1 cache while the frames pass."""
    cdef Py_ssize_t a0, m, n = x.shape[1]
    cdef int bad
    a0 = 0
    while a0 < n:
        m = 3 * (min(a0 + TILE, n) - a0)
        if real is float:
            bad = ts_rows_f32(level, &x[f0, a0, 0], 3 * n, f1 - f0, &shift[a0, 0], &out[0, a0, 0],
                              &out[1, a0, 0], &out[2, a0, 0], &out[3, a0, 0], m, squares, _LIMIT)
        else:
            bad = ts_rows_f64(level, &x[f0, a0, 0], 3 * n, f1 - f0, &shift[a0, 0], &out[0, a0, 0],
                              &out[1, a0, 0], &out[2, a0, 0], &out[3, a0, 0], m, squares, _LIMIT)
        if bad:
            return _first_bad(x, shift, f0, f1)
        a0 += TILE
    return -1


def fixed_sums(const real[:, :, ::1] x, const double[:, ::1] shift, int64_t[:, :, ::1] out, bint squares,
               int simd=3):
    """Add the fixed-point sums of ``x - shift`` (F, N, 3) over frames into ``out`` (4, N, 3) int64.

    Returns -1, or the first frame holding a value that is not finite or is 2048 Å or more from
    ``shift`` (``out`` then holds partial sums, to be discarded).  The GIL is released; Ctrl-C is
    noticed every 64 frames.  ``simd`` caps the vector width (0 baseline, 2 AVX2, 3 AVX-512), for tests.
    """
    cdef Py_ssize_t n_frames = x.shape[0], bad
    cdef int level = ts_fixed_level(simd)
    if x.shape[1] != shift.shape[0] or x.shape[2] != 3 or shift.shape[1] != 3:
        raise ValueError(f"coordinates {tuple(x.shape)[:3]} and shift {tuple(shift.shape)[:2]} do not match")
    if out.shape[0] != 4 or out.shape[1] != x.shape[1] or out.shape[2] != 3:
        raise ValueError("out must be (4, N, 3) int64")
    cdef Chunks ch = frame_chunks(n_frames, CHUNK)
    while next_chunk(&ch):
        with nogil:
            bad = _accumulate(x, shift, out, squares, ch.start, ch.stop, level)
        if bad >= 0:
            return bad
    return -1
