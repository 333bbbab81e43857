# cython: language_level=3
"""Exact sums of coordinates and their squares over frames, as fixed-point integers.

Each value ``d = x - shift`` is rounded once to a multiple of 2**-40 Å and each square
``d*d`` once to a multiple of 2**-40 Å²; the integers are added in int64 words.  Integer
addition is exact and associative, so partial sums over any split of the frames, added in
any order, give the same bits: that is what makes RMSF and the average structure the same
on every executor and task count.  A value is held as ``hi * 2**32 + lo`` (``lo`` in
[0, 2**32]) so that two int64 words hold more than 2**31 frames without overflow.
"""

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
    int ts_row_f32(const float *x, const double *shift, int64_t *s_hi, int64_t *s_lo, int64_t *q_hi,
                   int64_t *q_lo, int64_t n, int squares, double limit)
    int ts_row_f64(const double *x, const double *shift, int64_t *s_hi, int64_t *s_lo, int64_t *q_hi,
                   int64_t *q_lo, int64_t n, int squares, double limit)

cdef enum:
    TILE = 128   # atoms whose accumulators stay in L1 cache while the frames pass


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _accumulate(const real[:, :, ::1] x, const double[:, ::1] shift, int64_t[:, :, ::1] out,
                     bint squares, Py_ssize_t f0, Py_ssize_t f1) noexcept nogil:
    """Add frames [f0, f1) into ``out`` (4, N, 3): sum hi, sum lo, square hi, square lo.
    Returns 0, or 1 + the first frame with a value that is not finite or too far from ``shift``
    (its tile's sums are then incomplete: the caller raises).  Atoms go in tiles so that their
    accumulators stay in L1 cache across the frames."""
    cdef Py_ssize_t f, a0, m, n = x.shape[1]
    cdef int bad
    a0 = 0
    while a0 < n:
        m = 3 * (min(a0 + TILE, n) - a0)
        for f in range(f0, f1):
            if real is float:
                bad = ts_row_f32(&x[f, a0, 0], &shift[a0, 0], &out[0, a0, 0], &out[1, a0, 0],
                                 &out[2, a0, 0], &out[3, a0, 0], m, squares, _LIMIT)
            else:
                bad = ts_row_f64(&x[f, a0, 0], &shift[a0, 0], &out[0, a0, 0], &out[1, a0, 0],
                                 &out[2, a0, 0], &out[3, a0, 0], m, squares, _LIMIT)
            if bad:
                return <int>(f + 1)
        a0 += TILE
    return 0


def fixed_sums(const real[:, :, ::1] x, const double[:, ::1] shift, int64_t[:, :, ::1] out, bint squares):
    """Add the fixed-point sums of ``x - shift`` (F, N, 3) over frames into ``out`` (4, N, 3) int64.

    Returns -1, or the first frame holding a value that is not finite or is 2048 Å or more from
    ``shift`` (nothing is added from that frame on).  The GIL is released; Ctrl-C is noticed
    every 64 frames.
    """
    cdef Py_ssize_t n_frames = x.shape[0]
    cdef int bad = 0
    if x.shape[1] != shift.shape[0] or x.shape[2] != 3 or shift.shape[1] != 3:
        raise ValueError(f"coordinates {tuple(x.shape)[:3]} and shift {tuple(shift.shape)[:2]} do not match")
    if out.shape[0] != 4 or out.shape[1] != x.shape[1] or out.shape[2] != 3:
        raise ValueError("out must be (4, N, 3) int64")
    cdef Chunks ch = frame_chunks(n_frames, CHUNK)
    while next_chunk(&ch):
        with nogil:
            bad = _accumulate(x, shift, out, squares, ch.start, ch.stop)
        if bad:
            return bad - 1
    return -1
