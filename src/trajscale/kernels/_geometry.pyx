# cython: language_level=3
"""Compiled loops behind :mod:`trajscale.kernels.geometry` (Cython, built ahead of time).

Minimum-image distances in triclinic boxes, dihedral angles of atom quadruples, radius of gyration
and per-atom moments over frames.  Each kernel takes typed, native-endian, C-contiguous arrays (the wrappers in
``geometry.py`` convert once per call), runs with the GIL released in chunks of frames
and checks for signals (Ctrl-C) between chunks.  Every frame is summed in atom order.
"""

import numpy as np

from cython cimport floating
from libc.math cimport atan2, cos, fabs, rint, sin, sqrt, INFINITY
from libc.stdint cimport int64_t

from ._chunks cimport Chunks, chunks, next_chunk


cdef void _image_shifts(const double *h, double *out) noexcept nogil:
    """The 27 lattice vectors ix a + iy b + iz c (ix, iy, iz in -1, 0, 1) of one box (rows of ``h``, 3 x 3),
    as three rows of 28 (x, y, z; the 28th repeats the first, so that the loops run in fours)."""
    cdef int s = 0, ix, iy, iz, k
    for ix in range(-1, 2):
        for iy in range(-1, 2):
            for iz in range(-1, 2):
                for k in range(3):
                    out[28 * k + s] = ix * h[k] + iy * h[3 + k] + iz * h[6 + k]
                s += 1
    for k in range(3):
        out[28 * k + 27] = out[28 * k]


cdef inline double _shortest(double dx, double dy, double dz, const double *h, double safe2,
                             const double *shifts) noexcept nogil:
    """Length of the shortest of the 27 images of (dx, dy, dz) (MDAnalysis's 27: wrapped differences).

    Shortcut: a vector shorter than half the box's smallest perpendicular width is the shortest
    of all its images (any other differs by a lattice vector at least that long), so when
    (dx, dy, dz) or its image nearest in box coordinates is below ``safe2`` (that half width
    squared, less a margin), it is the one the 27-image loop would pick: return it at once.
    """
    cdef double d2 = dx * dx + dy * dy + dz * dz, n, rx, ry, rz, r0, r1, r2, c
    cdef double lens[28]
    cdef double m[4]
    cdef int s, l
    if d2 < safe2:
        return sqrt(d2)
    # The image nearest in box coordinates (rows c, b, a of the lower-triangular box) is, when
    # short enough, the same shortest image, for pairs split by the box's faces.
    n = rint(dz / h[8])
    rz = dz - n * h[8]
    ry = dy - n * h[7]
    rx = dx - n * h[6]
    n = rint(ry / h[4])
    ry = ry - n * h[4]
    rx = rx - n * h[3]
    rx -= rint(rx / h[0]) * h[0]
    d2 = rx * rx + ry * ry + rz * rz
    if d2 < safe2:
        return sqrt(d2)
    # All 27 images (a loop the compiler vectorises), then their minimum in four interleaved
    # chains: the minimum of the same numbers whatever the order, so the same bits.
    for s in range(28):
        r0 = dx + shifts[s]
        r1 = dy + shifts[28 + s]
        r2 = dz + shifts[56 + s]
        lens[s] = r0 * r0 + r1 * r1 + r2 * r2
    m[0] = m[1] = m[2] = m[3] = INFINITY
    for s in range(0, 28, 4):
        for l in range(4):
            c = lens[s + l]
            if c < m[l]:
                m[l] = c
    if m[1] < m[0]:
        m[0] = m[1]
    if m[3] < m[2]:
        m[2] = m[3]
    if m[2] < m[0]:
        m[0] = m[2]
    return sqrt(m[0])


def _check_boxes(a, b, h, safe2):
    if a.shape[0] != b.shape[0] or h.shape[0] != a.shape[0] or safe2.shape[0] != a.shape[0]:
        raise ValueError(f"{a.shape[0]} frames of a, {b.shape[0]} of b, {h.shape[0]} boxes, "
                         f"{safe2.shape[0]} safe radii")
    if a.shape[2] != 3 or b.shape[2] != 3 or h.shape[1] != 3 or h.shape[2] != 3:
        raise ValueError("coordinates must be (frames, atoms, 3) and boxes (frames, 3, 3)")


def triclinic_arrays(const double[:, :, ::1] a, const double[:, :, ::1] b, const double[:, :, ::1] h,
                     const double[::1] safe2):
    """(F, N, M) distances between wrapped ``a`` (F, N, 3) and ``b`` (F, M, 3) in boxes ``h`` (F, 3, 3).

    ``safe2`` (F,): squared half of each box's smallest perpendicular width (see ``_shortest``).
    """
    _check_boxes(a, b, h, safe2)
    cdef Py_ssize_t n_frames = a.shape[0], n = a.shape[1], m = b.shape[1], f, i, j
    out_a = np.empty((n_frames, n, m))
    cdef double[:, :, ::1] out = out_a
    cdef double shifts[84]
    cdef const double *hf
    cdef Chunks ch = chunks(n_frames, n * m)
    while next_chunk(&ch):
        with nogil:
            for f in range(ch.start, ch.stop):
                hf = &h[f, 0, 0]
                _image_shifts(hf, shifts)
                for i in range(n):
                    for j in range(m):
                        out[f, i, j] = _shortest(a[f, i, 0] - b[f, j, 0], a[f, i, 1] - b[f, j, 1],
                                                 a[f, i, 2] - b[f, j, 2], hf, safe2[f], shifts)
    return out_a


def triclinic_pairs(const double[:, :, ::1] a, const double[:, :, ::1] b, const double[:, :, ::1] h,
                    const double[::1] safe2):
    """(F, N) distances between wrapped row i of ``a`` and row i of ``b`` (F, N, 3) in boxes ``h``."""
    _check_boxes(a, b, h, safe2)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"pairs need as many atoms in a ({a.shape[1]}) as in b ({b.shape[1]})")
    cdef Py_ssize_t n_frames = a.shape[0], n = a.shape[1], f, i
    out_a = np.empty((n_frames, n))
    cdef double[:, ::1] out = out_a
    cdef double shifts[84]
    cdef const double *hf
    cdef Chunks ch = chunks(n_frames, n)
    while next_chunk(&ch):
        with nogil:
            for f in range(ch.start, ch.stop):
                hf = &h[f, 0, 0]
                _image_shifts(hf, shifts)
                for i in range(n):
                    out[f, i] = _shortest(a[f, i, 0] - b[f, i, 0], a[f, i, 1] - b[f, i, 1],
                                          a[f, i, 2] - b[f, i, 2], hf, safe2[f], shifts)
    return out_a


def indexed_pairs(const floating[:, :, ::1] x, const int64_t[::1] pa, const int64_t[::1] pb,
                  const double[:, ::1] lengths):
    """(F, P) distances between atoms ``pa[p]`` and ``pb[p]`` of ``x`` (F, A, 3), in float64, each difference
    minimum-imaged in the orthorhombic box of edges ``lengths[f]`` (a row of zeros: no box) as NumPy's
    ``d - L * round(d / L)`` is (``rint``: halves to even), its squares summed ``(x + y) + z`` as NumPy's
    reduction over the last axis sums three: the same bits as the NumPy path. Indices are checked."""
    cdef Py_ssize_t n_frames = x.shape[0], n_atoms = x.shape[1], n = pa.shape[0], f, p
    if x.shape[2] != 3 or pb.shape[0] != n or lengths.shape[0] != n_frames or lengths.shape[1] != 3:
        raise ValueError(f"pairs {pa.shape[0]}, {pb.shape[0]} and boxes {tuple(lengths.shape)} for coordinates "
                         f"of shape {tuple(x.shape)}")
    for p in range(n):
        if not (0 <= pa[p] < n_atoms and 0 <= pb[p] < n_atoms):
            raise IndexError(f"pair {p} ({pa[p]}, {pb[p]}) is outside the {n_atoms} atoms")
    out_a = np.empty((n_frames, n))
    cdef double[:, ::1] out = out_a
    cdef double dx, dy, dz, lx, ly, lz
    cdef Py_ssize_t i, j
    cdef bint boxed
    cdef Chunks ch = chunks(n_frames, n)
    while next_chunk(&ch):
        with nogil:
            for f in range(ch.start, ch.stop):
                lx, ly, lz = lengths[f, 0], lengths[f, 1], lengths[f, 2]
                boxed = lx != 0.0 or ly != 0.0 or lz != 0.0
                for p in range(n):
                    i, j = pa[p], pb[p]
                    dx = <double>x[f, i, 0] - <double>x[f, j, 0]
                    dy = <double>x[f, i, 1] - <double>x[f, j, 1]
                    dz = <double>x[f, i, 2] - <double>x[f, j, 2]
                    if boxed:
                        dx = dx - lx * rint(dx / lx)
                        dy = dy - ly * rint(dy / ly)
                        dz = dz - lz * rint(dz / lz)
                    out[f, p] = sqrt((dx * dx + dy * dy) + dz * dz)
    return out_a


def radius_of_gyration(const floating[:, :, ::1] x, const double[::1] masses):
    """(F,) mass-weighted radius of gyration of (F, N, 3) coordinates, float64 sums, two passes per frame."""
    cdef Py_ssize_t n_frames = x.shape[0], n = x.shape[1], f, i
    if x.shape[2] != 3 or masses.shape[0] != n:
        raise ValueError(f"{masses.shape[0]} masses for coordinates of shape {tuple(x.shape)}")
    out_a = np.empty(n_frames)
    cdef double[::1] out = out_a
    cdef double total = 0.0, cx, cy, cz, m, dx, dy, dz, s
    for i in range(n):
        total += masses[i]
    cdef Chunks ch = chunks(n_frames, 2 * n)
    while next_chunk(&ch):
        with nogil:
            for f in range(ch.start, ch.stop):
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
                out[f] = sqrt(s / total)
    return out_a




cdef inline void _dihedral_yx(double b[3][3], const double *L, double *y, double *x) noexcept nogil:
    """The bonds ``b`` (each minimum-imaged in place in the orthorhombic box of edges ``L``; ``L[0]`` zero:
    no box), then the two arguments of the dihedral's ``atan2``: ``y`` the normals' cross product along the
    middle bond over its length, ``x`` their dot product."""
    cdef double n1[3]
    cdef double n2[3]
    cdef Py_ssize_t j, c
    if L[0] > 0:
        for j in range(3):
            for c in range(3):
                # shorter than half the edge: rint(b / L) is ±0 and b - L * ±0 is b, or +0 for -0 (b + 0.0
                # gives those bits without the division)
                if 2.0 * fabs(b[j][c]) < L[c]:
                    b[j][c] = b[j][c] + 0.0
                else:
                    b[j][c] = b[j][c] - L[c] * rint(b[j][c] / L[c])
    n1[0] = b[0][1] * b[1][2] - b[0][2] * b[1][1]
    n1[1] = b[0][2] * b[1][0] - b[0][0] * b[1][2]
    n1[2] = b[0][0] * b[1][1] - b[0][1] * b[1][0]
    n2[0] = b[1][1] * b[2][2] - b[1][2] * b[2][1]
    n2[1] = b[1][2] * b[2][0] - b[1][0] * b[2][2]
    n2[2] = b[1][0] * b[2][1] - b[1][1] * b[2][0]
    x[0] = n1[0] * n2[0] + n1[1] * n2[1] + n1[2] * n2[2]
    y[0] = ((n1[1] * n2[2] - n1[2] * n2[1]) * b[1][0] + (n1[2] * n2[0] - n1[0] * n2[2]) * b[1][1]
            + (n1[0] * n2[1] - n1[1] * n2[0]) * b[1][2]) / sqrt(b[1][0] * b[1][0] + b[1][1] * b[1][1]
                                                                + b[1][2] * b[1][2])


cdef inline void _quad_yx(const floating[:, :, ::1] x, Py_ssize_t f, const int64_t[:, ::1] quad, Py_ssize_t k,
                          const double *L, double *y, double *dot) noexcept nogil:
    """:func:`_dihedral_yx` of the atoms ``quad[0..3, k]`` in frame ``f`` of ``x``: their three bond vectors
    in float64, then ``atan2``'s two arguments (what :func:`dihedrals` and :func:`dihedral_sincos` share)."""
    cdef double b[3][3]
    cdef int64_t a0 = quad[0, k], a1 = quad[1, k], a2 = quad[2, k], a3 = quad[3, k]
    cdef Py_ssize_t c
    for c in range(3):
        b[0][c] = <double>x[f, a1, c] - <double>x[f, a0, c]
        b[1][c] = <double>x[f, a2, c] - <double>x[f, a1, c]
        b[2][c] = <double>x[f, a3, c] - <double>x[f, a2, c]
    _dihedral_yx(b, L, y, dot)


def _check_quads(const int64_t[:, ::1] quad, Py_ssize_t n_atoms, Py_ssize_t n_frames, Py_ssize_t n_lengths,
                 Py_ssize_t width, Py_ssize_t lengths_width):
    if quad.shape[0] != 4 or width != 3 or n_lengths != n_frames or lengths_width != 3:
        raise ValueError("dihedrals need (F, A, 3) coordinates, (4, M) atom indices and (F, 3) box lengths")
    cdef Py_ssize_t j, k
    for j in range(4):
        for k in range(quad.shape[1]):
            if quad[j, k] < 0 or quad[j, k] >= n_atoms:
                raise IndexError(f"atom index {quad[j, k]} out of range for {n_atoms} atoms")


def dihedrals(const floating[:, :, ::1] x, const int64_t[:, ::1] quad, const double[:, ::1] lengths):
    """(F, M) dihedral angles in radians, (-π, π], of the atoms ``quad[0..3, m]`` in each frame of ``x``
    (F, A, 3), in float64: the three bond vectors (each minimum-imaged in an orthorhombic box of edge
    ``lengths[f]`` (F, 3), component by component as ``d - L * rint(d / L)``; a zero length: no box), then
    ``atan2`` of the two normals' cross product along the middle bond and their dot product, as
    MDAnalysis's ``calc_dihedrals``."""
    return _dihedral_table(x, quad, lengths, False)


def dihedral_sincos(const floating[:, :, ::1] x, const int64_t[:, ::1] quad, const double[:, ::1] lengths):
    """(F, M, 2) the sine and cosine of :func:`dihedrals`' angles, without the angle: ``y / r`` and
    ``x / r`` of the two arguments its ``atan2`` takes (``r = sqrt(x² + y²)``), equal to ``sin`` and ``cos``
    of the angle to rounding (three transcendental functions a dihedral fewer). Where ``r`` is zero or not
    finite (both normals zero, a zero-length middle bond, a coordinate not finite), ``sin`` and ``cos`` of
    ``atan2``'s angle, so that those cases keep its conventions (0 and 1 for ``atan2(0, 0)``, NaN)."""
    return _dihedral_table(x, quad, lengths, True).reshape(x.shape[0], quad.shape[1], 2)


def _dihedral_table(const floating[:, :, ::1] x, const int64_t[:, ::1] quad, const double[:, ::1] lengths,
                    bint sincos):
    """:func:`dihedrals` (F, M), or with ``sincos`` :func:`dihedral_sincos` as (F, 2 M): one loop."""
    _check_quads(quad, x.shape[1], x.shape[0], lengths.shape[0], x.shape[2], lengths.shape[1])
    cdef Py_ssize_t n_frames = x.shape[0], m = quad.shape[1], f, k, c
    out_a = np.empty((n_frames, 2 * m if sincos else m))
    cdef double[:, ::1] out = out_a
    cdef double L[3]
    cdef double dot, y, r, a
    cdef Chunks ch = chunks(n_frames, 8 * m)
    while next_chunk(&ch):
        with nogil:
            for f in range(ch.start, ch.stop):
                for c in range(3):
                    L[c] = lengths[f, c]
                for k in range(m):
                    _quad_yx(x, f, quad, k, L, &y, &dot)
                    if not sincos:
                        out[f, k] = atan2(y, dot)
                        continue
                    r = sqrt(y * y + dot * dot)
                    if r > 0 and r < INFINITY:
                        out[f, 2 * k] = y / r
                        out[f, 2 * k + 1] = dot / r
                    else:
                        a = atan2(y, dot)
                        out[f, 2 * k] = sin(a)
                        out[f, 2 * k + 1] = cos(a)
    return out_a
