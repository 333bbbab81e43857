# cython: language_level=3
"""The loops behind :mod:`trajscale.store.codecs` (compiled ahead of time, GIL released).

One pass per frame (undo the zigzag, running sum along atoms, scale) instead of
NumPy's five passes over the slab: the decode keeps up with zstd. The thin
wrappers in ``codecs.py`` check shapes and convert dtypes once per call; these
functions take C-contiguous native arrays only. Ctrl-C is looked for every
``SLICE`` seconds (between frames).
"""

from libc.math cimport rint, fabs
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from cpython.exc cimport PyErr_CheckSignals

ctypedef fused real:
    float
    double

cdef double SLICE = 0.05

# Three int16 lanes of a uint64 (x in bits 0-15, y 16-31, z 32-47), worked on together (SWAR).
cdef uint64_t LANES = 0xFFFFFFFFFFFFULL
cdef uint64_t LOW_BITS = 0x0000000100010001ULL
cdef uint64_t LOW_15 = 0x00007FFF7FFF7FFFULL
cdef uint64_t HIGH_BIT = 0x0000800080008000ULL
cdef uint64_t U16 = 0xFFFFULL


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
    """``store.codecs.Deltas32``: zigzag-coded uint32 differences along atoms (axis 1) to float32 ``out``.

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


cdef inline uint64_t _load(const uint16_t* p, bint six) noexcept nogil:
    """The triple of uint16 at ``p`` in the low 48 bits (8 bytes loaded unaligned, or 6 at a row's end)."""
    cdef uint64_t u = 0
    if six:
        memcpy(&u, p, 6)
        return u
    memcpy(&u, p, 8)
    return u & LANES


cdef inline void _refs16_frame(const uint16_t* row, Py_ssize_t n_atoms, const int32_t* pos, const int32_t* off,
                               const float* tx, const float* ty, const float* tz, float* of,
                               bint last) noexcept nogil:
    """One frame: atom ``a``'s triple at ``row + pos[a]``, its reference ``off[a]`` atoms back (0: none).

    An atom's three values travel as int16 lanes of one uint64: one load, the zigzag and the
    sum modulo 2^16 for the three at once, one register per remembered atom (an atom refers
    at most three back); the values come from the per-axis tables (the float32 nearest
    (steps + centre) x q). ``last``: the row ends the buffer, so an atom stored last is loaded
    with 6 bytes (the others read 2 bytes past their triple, inside the row).
    """
    cdef uint64_t h1 = 0, h2 = 0, h3 = 0, r, u, d, v
    cdef Py_ssize_t a
    cdef int32_t o
    cdef size_t p, end = 3 * <size_t>n_atoms
    for a in range(n_atoms):
        o = off[a]
        if o == 1:
            r = h1
        elif o == 2:
            r = h2
        elif o == 3:
            r = h3
        else:
            r = 0
        p = <size_t>pos[a]
        u = _load(row + p, last and p + 4 > end)
        d = ((u >> 1) & LOW_15) ^ ((u & LOW_BITS) * U16)       # zigzag, per lane
        v = ((r & LOW_15) + (d & LOW_15)) ^ ((r ^ d) & HIGH_BIT)  # lane sums modulo 2^16
        h3 = h2
        h2 = h1
        h1 = v
        of[3 * a] = tx[v & U16]
        of[3 * a + 1] = ty[(v >> 16) & U16]
        of[3 * a + 2] = tz[(v >> 32) & U16]


def decode_refs16(const uint16_t[:, :, ::1] raw, const int32_t[::1] pos, const int32_t[::1] off,
                  const float[:, ::1] table, float[:, :, ::1] out):
    """``store.codecs.Deltas``: (frames, atoms, 3) uint16 as stored to float32 ``out`` in atom order.

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
                if f < n_frames - 1:   # two call sites: the compiler drops the end-of-buffer test from the first
                    _refs16_frame(&raw[f, 0, 0], n_atoms, &pos[0], &off[0], &table[0, 0], &table[1, 0],
                                  &table[2, 0], &out[f, 0, 0], False)
                else:
                    _refs16_frame(&raw[f, 0, 0], n_atoms, &pos[0], &off[0], &table[0, 0], &table[1, 0],
                                  &table[2, 0], &out[f, 0, 0], True)
                f += 1
                if _now() - t0 > SLICE:
                    break
        PyErr_CheckSignals()


cdef inline int64_t _refs16_encode_frame(const real* vf, Py_ssize_t n_atoms, double q, const double* center,
                                         const int32_t* pos, const int32_t* off, uint16_t* of) noexcept nogil:
    cdef Py_ssize_t a
    cdef int c
    cdef int32_t o
    cdef double s, r
    cdef int16_t d
    for a in range(n_atoms):
        o = off[a]
        for c in range(3):
            s = rint((<double>vf[3 * a + c]) / q) - center[c]
            if not fabs(s) <= 32767.0:
                return a * 3 + c
            r = 0.0
            if o:
                r = rint((<double>vf[3 * (a - o) + c]) / q) - center[c]
            d = <int16_t><int32_t>(s - r)   # |s - r| < 2^16: the int16 cast takes it modulo 2^16
            of[pos[a] + c] = <uint16_t>((<uint32_t><int32_t>d << 1) ^ <uint32_t>(<int32_t>d >> 15))
    return -1


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
                bad = _refs16_encode_frame(&values[f, 0, 0], n_atoms, q, &center[0], &pos[0], &off[0], &out[f, 0])
                if bad >= 0:
                    bad += f * n_atoms * 3
                    break
                f += 1
                if _now() - t0 > SLICE:
                    break
        PyErr_CheckSignals()
    return bad
