# cython: language_level=3
"""The loops behind :mod:`trajscale.h5md.codecs` (compiled ahead of time, GIL released).

One pass per frame (undo the zigzag, running sum along atoms, scale) instead of
NumPy's five passes over the slab: the decode keeps up with zstd. The thin
wrappers in ``codecs.py`` check shapes and convert dtypes once per call; these
functions take C-contiguous native arrays only. Ctrl-C is looked for every
``SLICE`` seconds (between frames).
"""

from libc.math cimport fabs
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy  # (for the C below)
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from cpython.exc cimport PyErr_CheckSignals

ctypedef fused real:
    float
    double

cdef double SLICE = 0.05

cdef extern from *:
    """
    /* Three int16 lanes of a uint64 (x in bits 0-15, y 16-31, z 32-47), worked on together (SWAR);
       macros, so that the compiler folds them into the instructions. */
    #define TS_LANES 0xFFFFFFFFFFFFULL
    #define TS_LOW_BITS 0x0000000100010001ULL
    #define TS_LOW_15 0x00007FFF7FFF7FFFULL
    #define TS_HIGH_BIT 0x0000800080008000ULL
    #define TS_U16 0xFFFFULL
    /* rint (ties to even, the default rounding mode) without a libm call: baseline x86-64 has no
       rounding instruction, so the compiler calls rint() for every value. Adding 2^52 leaves no
       fraction bits; below 2^52 that is exact rounding, above it every double is an integer. */
    static inline double ts_rint(double y) {
        double a = fabs(y);
        return a < 4503599627370496.0 ? copysign((a + 4503599627370496.0) - 4503599627370496.0, y) : y;
    }

    /* An atom's triple of uint16 in the low 48 bits: 8 bytes loaded unaligned, or 6 at a buffer's end. */
    static inline uint64_t ts_load8(const uint16_t* p) { uint64_t u; memcpy(&u, p, 8); return u & TS_LANES; }
    static inline uint64_t ts_load6(const uint16_t* p) { uint64_t u = 0; memcpy(&u, p, 6); return u; }

    #define TS_REFS16_LOOP(LOAD)                                                            \
        for (ptrdiff_t a = 0; a < n_atoms; a++) {                                           \
            int32_t o = off[a];                                                             \
            uint64_t r = o == 1 ? h1 : o == 2 ? h2 : o == 3 ? h3 : 0;                       \
            size_t p = (size_t)pos[a];                                                      \
            uint64_t u = LOAD;                                                              \
            uint64_t d = ((u >> 1) & TS_LOW_15) ^ ((u & TS_LOW_BITS) * TS_U16); /* zigzag */ \
            uint64_t v = ((r & TS_LOW_15) + (d & TS_LOW_15)) ^ ((r ^ d) & TS_HIGH_BIT);      \
            h3 = h2; h2 = h1; h1 = v;                                                       \
            of[3 * a] = tx[v & TS_U16];                                                     \
            of[3 * a + 1] = ty[(v >> 16) & TS_U16];                                         \
            of[3 * a + 2] = tz[(v >> 32) & TS_U16];                                         \
        }

    /* One frame of Deltas: atom a's triple at row + pos[a], its reference off[a] (0-3) atoms back.
       The three values travel as int16 lanes of one uint64: one load, the zigzag and the sum modulo
       2^16 for the three at once (lane sums without carries across lanes), one register per
       remembered atom; the floats come from the per-axis tables.  last: the row ends the buffer,
       so the atoms stored last are loaded with 6 bytes (the others read 2 bytes of the next triple). */
    static __attribute__((noinline)) void ts_refs16_frame(const uint16_t* row, ptrdiff_t n_atoms, const int32_t* pos, const int32_t* off,
                                const float* tx, const float* ty, const float* tz, float* of, int last) {
        uint64_t h1 = 0, h2 = 0, h3 = 0;
        size_t end = 3 * (size_t)n_atoms;
        if (!last) {
            TS_REFS16_LOOP(ts_load8(row + p))
        } else {
            TS_REFS16_LOOP(p + 4 > end ? ts_load6(row + p) : ts_load8(row + p))
        }
    }

    /* Inverse of ts_refs16_frame for one frame of float (or double) values: the steps
       rint(value / q) - centre less the reference atom's (kept from its own turn, not computed
       again), zigzag-coded modulo 2^16.  Returns the index of the first value not finite or
       beyond 32767 steps, else -1. */
    #define TS_ENCODE(NAME, T)                                                                   \
    static __attribute__((noinline)) ptrdiff_t NAME(const T* vf, ptrdiff_t n_atoms, double q, const double* center,        \
                          const int32_t* pos, const int32_t* off, uint16_t* of) {                \
        double p1[3] = {0, 0, 0}, p2[3] = {0, 0, 0}, p3[3] = {0, 0, 0}, s[3];                     \
        for (ptrdiff_t a = 0; a < n_atoms; a++) {                                                \
            int32_t o = off[a];                                                                  \
            for (int c = 0; c < 3; c++) {                                                        \
                s[c] = ts_rint((double)vf[3 * a + c] / q) - center[c];                           \
                if (!(fabs(s[c]) <= 32767.0)) return 3 * a + c;                                  \
            }                                                                                    \
            for (int c = 0; c < 3; c++) {                                                        \
                double r = o == 1 ? p1[c] : o == 2 ? p2[c] : o == 3 ? p3[c] : 0.0;               \
                int16_t d = (int16_t)(int32_t)(s[c] - r);  /* |s - r| < 2^16: modulo 2^16 */     \
                of[pos[a] + c] = (uint16_t)(((uint32_t)(int32_t)d << 1) ^ (uint32_t)((int32_t)d >> 15)); \
                p3[c] = p2[c]; p2[c] = p1[c]; p1[c] = s[c];                                      \
            }                                                                                    \
        }                                                                                        \
        return -1;                                                                               \
    }
    TS_ENCODE(ts_encode_f32, float)
    TS_ENCODE(ts_encode_f64, double)
    """
    const uint64_t LANES "TS_LANES"
    const uint64_t LOW_BITS "TS_LOW_BITS"
    const uint64_t LOW_15 "TS_LOW_15"
    const uint64_t HIGH_BIT "TS_HIGH_BIT"
    const uint64_t U16 "TS_U16"
    double ts_rint(double y) noexcept nogil
    void ts_refs16_frame(const uint16_t* row, Py_ssize_t n_atoms, const int32_t* pos, const int32_t* off,
                         const float* tx, const float* ty, const float* tz, float* of, bint last) noexcept nogil
    Py_ssize_t ts_encode_f32(const float* vf, Py_ssize_t n_atoms, double q, const double* center,
                             const int32_t* pos, const int32_t* off, uint16_t* of) noexcept nogil
    Py_ssize_t ts_encode_f64(const double* vf, Py_ssize_t n_atoms, double q, const double* center,
                             const int32_t* pos, const int32_t* off, uint16_t* of) noexcept nogil


cdef inline double _now() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return t.tv_sec + 1e-9 * t.tv_nsec


cdef inline void _deltas32_frame(const uint32_t* raw, Py_ssize_t n_atoms, Py_ssize_t n_dim, double q,
                                 float* out) noexcept nogil:
    cdef uint32_t acc[8]
    cdef uint32_t u
    cdef Py_ssize_t a, c
    for c in range(n_dim):
        acc[c] = 0
    for a in range(n_atoms):
        for c in range(n_dim):
            u = raw[a * n_dim + c]
            acc[c] += (u >> 1) ^ (0u - (u & 1u))   # modulo 2^32, as int32 wraps
            out[a * n_dim + c] = <float>((<int32_t>acc[c]) * q)   # the float32 nearest i x q


cdef inline void _deltas32_frame3(const uint32_t* raw, Py_ssize_t n_atoms, double q, float* out) noexcept nogil:
    cdef uint32_t x = 0, y = 0, z = 0, u
    cdef Py_ssize_t a
    for a in range(n_atoms):
        u = raw[3 * a]
        x += (u >> 1) ^ (0u - (u & 1u))
        u = raw[3 * a + 1]
        y += (u >> 1) ^ (0u - (u & 1u))
        u = raw[3 * a + 2]
        z += (u >> 1) ^ (0u - (u & 1u))
        out[3 * a] = <float>((<int32_t>x) * q)
        out[3 * a + 1] = <float>((<int32_t>y) * q)
        out[3 * a + 2] = <float>((<int32_t>z) * q)


def decode_deltas(const uint32_t[:, :, ::1] raw, double q, float[:, :, ::1] out):
    """``h5md.codecs.Deltas32``: zigzag-coded uint32 differences along atoms (axis 1) to float32 ``out``.

    Each value is the float32 nearest ``(running sum, int32) x q`` (q in float64).
    """
    cdef Py_ssize_t n_frames = raw.shape[0], n_atoms = raw.shape[1], n_dim = raw.shape[2], f = 0
    cdef double t0
    if out.shape[0] != n_frames or out.shape[1] != n_atoms or out.shape[2] != n_dim:
        raise ValueError("out must have raw's shape")
    if n_dim > 8:
        raise ValueError("at most 8 values per atom")
    if n_frames == 0 or n_atoms == 0 or n_dim == 0:
        return
    while f < n_frames:
        with nogil:
            t0 = _now()
            while f < n_frames:
                if n_dim == 3:
                    _deltas32_frame3(&raw[f, 0, 0], n_atoms, q, &out[f, 0, 0])
                else:
                    _deltas32_frame(&raw[f, 0, 0], n_atoms, n_dim, q, &out[f, 0, 0])
                f += 1
                if _now() - t0 > SLICE:
                    break
        PyErr_CheckSignals()


def decode_refs16(const uint16_t[:, :, ::1] raw, const int32_t[::1] pos, const int32_t[::1] off,
                  const float[:, ::1] table, float[:, :, ::1] out):
    """``h5md.codecs.Deltas``: (frames, atoms, 3) uint16 as stored to float32 ``out`` in atom order.

    ``pos[a]``: the index of atom ``a``'s triple in a frame's row (a multiple of 3, < 3 x atoms);
    ``off[a]``: its reference, 0 to 3 atoms back (0 for atom 0); ``table[axis, step & 0xFFFF]``:
    the float32 of a step count. The caller checks ``pos`` and ``off`` (:class:`Deltas` does).
    """
    cdef Py_ssize_t n_frames = raw.shape[0], n_atoms = raw.shape[1], f = 0
    cdef double t0
    if raw.shape[2] != 3 or out.shape[0] != n_frames or out.shape[1] != n_atoms or out.shape[2] != 3:
        raise ValueError("raw and out must both be (frames, atoms, 3)")
    if pos.shape[0] != n_atoms or off.shape[0] != n_atoms:
        raise ValueError("one pos and off per atom")
    if table.shape[0] != 3 or table.shape[1] != 65536:
        raise ValueError("table must be (3, 65536)")
    if n_frames == 0 or n_atoms == 0:
        return
    while f < n_frames:
        with nogil:
            t0 = _now()
            while f < n_frames:
                if f < n_frames - 1:   # the last frame ends the buffer: its last atoms are loaded with 6 bytes
                    ts_refs16_frame(&raw[f, 0, 0], n_atoms, &pos[0], &off[0], &table[0, 0], &table[1, 0],
                                    &table[2, 0], &out[f, 0, 0], False)
                else:
                    ts_refs16_frame(&raw[f, 0, 0], n_atoms, &pos[0], &off[0], &table[0, 0], &table[1, 0],
                                    &table[2, 0], &out[f, 0, 0], True)
                f += 1
                if _now() - t0 > SLICE:
                    break
        PyErr_CheckSignals()


def encode_refs16(const real[:, :, ::1] values, double q, const double[::1] center, const int32_t[::1] pos,
                  const int32_t[::1] off, uint16_t[:, ::1] out):
    """Inverse of :func:`decode_refs16` into ``out`` (frames, 3 x atoms) uint16: the steps
    ``rint(value / q) - centre`` of each atom less those of its reference, zigzag-coded modulo
    2^16, at the atom's stored position.  Returns the flat index of the first value that is
    not finite or lies beyond 32767 steps, else -1 (``out`` is then incomplete).
    """
    cdef Py_ssize_t n_frames = values.shape[0], n_atoms = values.shape[1], f = 0
    cdef int64_t bad = -1
    cdef double t0
    if values.shape[2] != 3 or out.shape[0] != n_frames or out.shape[1] != 3 * n_atoms:
        raise ValueError("values must be (frames, atoms, 3) and out (frames, 3 x atoms)")
    if pos.shape[0] != n_atoms or off.shape[0] != n_atoms or center.shape[0] != 3:
        raise ValueError("one pos and off per atom, and 3 centres")
    if n_frames == 0 or n_atoms == 0:
        return -1
    while f < n_frames and bad < 0:
        with nogil:
            t0 = _now()
            while f < n_frames:
                if real is float:
                    bad = ts_encode_f32(&values[f, 0, 0], n_atoms, q, &center[0], &pos[0], &off[0], &out[f, 0])
                else:
                    bad = ts_encode_f64(&values[f, 0, 0], n_atoms, q, &center[0], &pos[0], &off[0], &out[f, 0])
                if bad >= 0:
                    bad += f * n_atoms * 3
                    break
                f += 1
                if _now() - t0 > SLICE:
                    break
        PyErr_CheckSignals()
    return bad
