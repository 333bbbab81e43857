# cython: language_level=3
"""Cell list for RDF histograms, with MDAnalysis's arithmetic (compiled ahead of time, GIL released).

``InterRDF`` histograms the distances that ``capped_distance`` returns; a pair that
moves across a bin edge by one rounding changes a count, so this kernel repeats
MDAnalysis's float32 wrapping (``_triclinic_pbc``/``_ortho_pbc`` of
``calc_distances.h``), its float32 coordinate differences, its double-precision
minimum image and its inclusion test, and NumPy's histogram binning. Only the
search differs: a cell list over the box coordinates of the second selection,
built once per frame, all frames of a block in one call.

Every ``float`` below is float32 and every ``double`` float64, as in MDAnalysis's C:
the types of each expression are part of the result.
"""

from libc.math cimport INFINITY, NAN, floor, rint, sqrt, trunc, fabs
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memset
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from cpython.exc cimport PyErr_CheckSignals

import numpy as np


cdef extern from "csrc/rdf_cells.h" nogil:
    ctypedef struct ts_cells_t:
        float box[9]
        float len[3]
        double zf, bi3, bi6, h3, h6, h7
        float tol
        double rh[3]
        double dn[3]
        int32_t n[3]
    int ts_cells_level(int wanted)
    void ts_prefetch(const void *p)
    void ts_wrap_cells(int level, int triclinic, const float *x, const int64_t *idx, int64_t n,
                       const ts_cells_t *g, float *X, float *Y, float *Z, int32_t *cell)

cdef extern from "csrc/rdf_look.h" nogil:
    int TS_LOOK_PAD
    ctypedef struct ts_seg_t:
        int64_t p, pe
        float f[3]
    int64_t ts_look_tric(int level, float ax, float ay, float az, const ts_seg_t *seg, int64_t nseg,
                         const float *bx, const float *by, const float *bz, float near, float far,
                         int32_t *cand, int32_t *cseg, float *cd2)
    int64_t ts_look_ortho(int level, float ax, float ay, float az, const float *half, const float *len,
                          const ts_seg_t *seg, int64_t nseg, const float *bx, const float *by, const float *bz,
                          float near, float far, int32_t *cand, int32_t *cseg, float *cd2)

#: The vector width of the second selection's wrap and cells on this CPU (csrc/rdf_cells.h): 0 the scalar
#: code, 2 AVX2, 3 AVX-512 (the same counts with each).
SIMD_LEVEL = ts_cells_level(3)
cdef int _LEVEL = SIMD_LEVEL


def set_simd_level(int level):
    """Use vector width ``level`` (at most :data:`SIMD_LEVEL`; 0 the scalar code) from now on; returns the one
    in use before (for tests and benchmarks that compare the widths)."""
    global _LEVEL
    cdef int before = _LEVEL
    _LEVEL = ts_cells_level(level)
    return before

#: Seconds of work between two looks for Ctrl-C (the GIL is taken back that often).
cdef double SLICE = 0.05
cdef double FLT_MAX_D = 3.4028234663852886e38
cdef enum:
    TAB_N = 4096   # buckets of the table of bins by squared float32 distance (int32 each: 16 KB, in L1)
#: Fewest pairs within the cut-off that a call is expected to bin (its grid's atoms spread evenly over each
#: frame's box) for which the table is made: it takes about 0.05 ms, and saves about 0.02 us a pair.
cdef double TAB_MIN_PAIRS = 3000
#: Most bytes of the next frame fetched into the cache while a frame is searched.
cdef Py_ssize_t AHEAD_MAX = 4 << 20
#: Fewest atoms of a for which the next frame is fetched ahead (fewer: too little work to overlap).
cdef Py_ssize_t AHEAD_MIN_A = 32


cdef inline double _now() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return t.tv_sec + 1e-9 * t.tv_nsec


cdef inline void _ortho_pbc(float* c, Py_ssize_t n, const float* box) noexcept nogil:
    """``_ortho_pbc``: (n, 3) coordinates into the orthorhombic box (3,), in place."""
    cdef double inv[3]
    cdef Py_ssize_t i
    cdef int j
    cdef float crd
    cdef double s
    for j in range(3):
        inv[j] = 1.0 / <double>box[j]
    for i in range(n):
        for j in range(3):
            crd = c[3 * i + j]
            if crd < 0.0:
                crd = crd + box[j]
                if crd < 0.0:
                    s = floor(c[3 * i + j] * inv[j])
                    c[3 * i + j] = c[3 * i + j] - (<float>s) * box[j]
                    if c[3 * i + j] < 0.0:
                        c[3 * i + j] = c[3 * i + j] + box[j]
                else:
                    c[3 * i + j] = crd
            if crd >= box[j]:
                crd = crd - box[j]
                if crd >= box[j]:
                    s = floor(c[3 * i + j] * inv[j])
                    c[3 * i + j] = c[3 * i + j] - (<float>s) * box[j]
                    if c[3 * i + j] >= box[j]:
                        c[3 * i + j] = c[3 * i + j] - box[j]
                else:
                    c[3 * i + j] = crd


cdef inline void _triclinic_pbc(float* c, Py_ssize_t n, const float* box) noexcept nogil:
    """``_triclinic_pbc``: (n, 3) coordinates into the triclinic box (9,) (row vectors), in place."""
    cdef double bi0 = 1.0 / <double>box[0]
    cdef double bi4 = 1.0 / <double>box[4]
    cdef double bi8 = 1.0 / <double>box[8]
    cdef double bi3 = (<double>(-box[3])) * bi0 * bi4
    cdef double bi6 = (-bi3 * box[7] - box[6] * bi0) * bi8
    cdef double bi7 = (<double>(-box[7])) * bi4 * bi8
    cdef double zf = (<double>box[7]) * bi8
    cdef double lb, ub
    cdef float c0, c1, c2, s
    cdef float* p
    cdef bint msr
    cdef Py_ssize_t i
    for i in range(n):
        p = c + 3 * i
        msr = False
        c0 = p[0]
        c1 = p[1]
        c2 = p[2]
        if c2 < 0.0:
            c0 = c0 + box[6]
            c1 = c1 + box[7]
            c2 = c2 + box[8]
            if c2 < 0.0:
                msr = True
        if c2 >= box[8]:
            c0 = c0 - box[6]
            c1 = c1 - box[7]
            c2 = c2 - box[8]
            if c2 >= box[8]:
                msr = True
        if not msr:
            lb = c2 * zf
            ub = lb + box[4]
            if c1 < lb:
                c0 = c0 + box[3]
                c1 = c1 + box[4]
                if c1 < lb:
                    msr = True
            if c1 >= ub:
                c0 = c0 - box[3]
                c1 = c1 - box[4]
                if c1 >= ub:
                    msr = True
            if not msr:
                lb = -(c1 * bi3 + c2 * bi6) * box[0]
                ub = lb + box[0]
                if c0 < lb:
                    c0 = c0 + box[0]
                    if c0 < lb:
                        msr = True
                if c0 >= ub:
                    c0 = c0 - box[0]
                    if c0 >= ub:
                        msr = True
        if not msr:
            p[0] = c0
            p[1] = c1
            p[2] = c2
            continue
        s = <float>floor(p[2] * bi8)
        p[2] = p[2] - s * box[8]
        p[1] = p[1] - s * box[7]
        p[0] = p[0] - s * box[6]
        s = <float>floor(p[1] * bi4 + p[2] * bi7)
        p[1] = p[1] - s * box[4]
        p[0] = p[0] - s * box[3]
        s = <float>floor(p[0] * bi0 + p[1] * bi3 + p[2] * bi6)
        p[0] = p[0] - s * box[0]
        c0 = p[0]
        c1 = p[1]
        c2 = p[2]
        if c2 < 0.0:
            c0 = c0 + box[6]
            c1 = c1 + box[7]
            c2 = c2 + box[8]
        if c2 >= box[8]:
            c0 = c0 - box[6]
            c1 = c1 - box[7]
            c2 = c2 - box[8]
        lb = c2 * zf
        ub = lb + box[4]
        if c1 < lb:
            c0 = c0 + box[3]
            c1 = c1 + box[4]
        if c1 >= ub:
            c0 = c0 - box[3]
            c1 = c1 - box[4]
        lb = -(c1 * bi3 + c2 * bi6) * box[0]
        ub = lb + box[0]
        if c0 < lb:
            c0 = c0 + box[0]
        if c0 >= ub:
            c0 = c0 - box[0]
        p[0] = c0
        p[1] = c1
        p[2] = c2


cdef inline double _tric_d2(double dx, double dy, double dz, const float* box,
                            double ix, double iy, double iz) noexcept nogil:
    """Squared length of image (ix, iy, iz) of (dx, dy, dz), in ``minimum_image_triclinic``'s operation order."""
    cdef double rx = dx + box[0] * ix
    cdef double ry0 = rx + box[3] * iy
    cdef double ry1 = dy + box[4] * iy
    cdef double rz0 = ry0 + box[6] * iz
    cdef double rz1 = ry1 + box[7] * iz
    cdef double rz2 = dz + box[8] * iz
    return rz0 * rz0 + rz1 * rz1 + rz2 * rz2


cdef inline double _tric_min_d2(double dx, double dy, double dz, const float* box,
                                double ix, double iy, double iz, double safe2) noexcept nogil:
    """``minimum_image_triclinic``'s squared distance, given a first guess (ix, iy, iz) of the image.

    A guess shorter than half the box's smallest width is the shortest of all images
    (and among MDAnalysis's 27): its value, computed in MDAnalysis's order, is the one
    MDAnalysis returns. Otherwise MDAnalysis's 27-image loop.
    """
    cdef double d2, best
    cdef int jx, jy, jz
    if fabs(ix) <= 1 and fabs(iy) <= 1 and fabs(iz) <= 1:
        d2 = _tric_d2(dx, dy, dz, box, ix, iy, iz)
        if d2 < safe2:
            return d2
    best = FLT_MAX_D
    for jx in range(-1, 2):
        for jy in range(-1, 2):
            for jz in range(-1, 2):
                d2 = _tric_d2(dx, dy, dz, box, jx, jy, jz)
                if d2 < best:
                    best = d2
    return best


cdef inline double _round_half_away(double s) noexcept nogil:
    """C's ``round``: halves away from zero."""
    cdef double t = trunc(s)
    if fabs(s - t) >= 0.5:
        t += 1.0 if s > 0 else -1.0
    return t


cdef inline Py_ssize_t _bin(double d, const double* edges, Py_ssize_t n) noexcept nogil:
    """``np.histogram``'s bin of ``d`` over equal-width ``edges`` (n + 1), or -1 outside the range."""
    cdef double lo = edges[0]
    cdef double hi = edges[n]
    cdef Py_ssize_t k
    if not (d >= lo and d <= hi):
        return -1
    k = <Py_ssize_t>(((d - lo) / (hi - lo)) * n)
    if k == n:
        k -= 1
    if d < edges[k]:
        k -= 1
    elif d >= edges[k + 1] and k != n - 1:
        k += 1
    return k


cdef inline Py_ssize_t _bin_r(double d, const double* edges, Py_ssize_t n, double scale) noexcept nogil:
    """``_bin`` with the first guess a product with ``scale`` = n / (hi - lo) (NumPy's own in older versions):
    a guess one bin off, which a rounding can give either way, is set right by the comparisons with the edges,
    as in ``_bin`` and ``np.histogram``."""
    cdef double lo = edges[0]
    cdef Py_ssize_t k
    if not (d >= lo and d <= edges[n]):
        return -1
    k = <Py_ssize_t>((d - lo) * scale)
    if k >= n:
        k = n - 1
    if d < edges[k]:
        k -= 1
    elif d >= edges[k + 1] and k != n - 1:
        k += 1
    return k


cdef inline int64_t _clamp_floor(double s, int64_t n) noexcept nogil:
    cdef double t = floor(s * n)
    if not t >= 0:
        return 0
    if t > n - 1:
        return n - 1
    return <int64_t>t


cdef inline void _cell(float x, float y, float z, const double* h, int64_t n0, int64_t n1, int64_t n2,
                       int64_t* out) noexcept nogil:
    """Cell (3,) of a point from its box coordinates (clamped into the grid)."""
    cdef double s2 = z / h[8]
    cdef double s1 = (y - s2 * h[7]) / h[4]
    cdef double s0 = (x - s1 * h[3] - s2 * h[6]) / h[0]
    out[0] = _clamp_floor(s0, n0)
    out[1] = _clamp_floor(s1, n1)
    out[2] = _clamp_floor(s2, n2)


cdef inline int64_t _clamp_trunc(double v, double dn, int64_t n) noexcept nogil:
    """``_clamp_floor`` of ``v = s * n`` without a floor: truncation is the floor of a value >= 0."""
    if not v >= 0:
        return 0
    if v >= dn:
        return n - 1
    return <int64_t>v


cdef inline void _cell_r(float x, float y, float z, const double* h, const double* rh, const double* dn,
                         int64_t n0, int64_t n1, int64_t n2, int64_t* out) noexcept nogil:
    """``_cell`` with the divisions by the box's diagonal as products with their inverses ``rh`` (3,)
    (``dn``: the cells per axis as doubles): a point a rounding from a cell's face may fall in the next
    cell, which the cells' 1e-3 Å margin over the cut-off covers."""
    cdef double s2 = z * rh[2]
    cdef double s1 = (y - s2 * h[7]) * rh[1]
    cdef double s0 = (x - s1 * h[3] - s2 * h[6]) * rh[0]
    out[0] = _clamp_trunc(s0 * dn[0], dn[0], n0)
    out[1] = _clamp_trunc(s1 * dn[1], dn[1], n1)
    out[2] = _clamp_trunc(s2 * dn[2], dn[2], n2)


cdef inline int64_t _wrap_cell(int64_t t, int64_t n, double* image) noexcept nogil:
    """Neighbour cell ``t`` on an axis of ``n`` cells, wrapped into [0, n); ``image``: +1 where it wrapped
    from below, -1 from above, else 0 (the box image that the first guess of the minimum image adds)."""
    if t < 0:
        image[0] = 1.0
        return t + n
    if t >= n:
        image[0] = -1.0
        return t - n
    image[0] = 0.0
    return t


cdef struct Frame:
    # inputs of one frame
    const float* x          # (N, 3) positions
    const float* box        # (9,) box vectors
    const float* dims       # (6,)
    bint tric, bf
    bint pbc                # False: no box (MDAnalysis's pseudo-box search: shifted, not wrapped)
    const float* shift      # (3,) subtracted from the coordinates where not pbc
    int64_t n0, n1, n2
    int64_t k               # cells per cut-off of the sorted search (0: the general one, _frame)
    const char* ahead       # the span of the next frame that b's atoms occupy (NULL: none), fetched into
    Py_ssize_t ahead_bytes  # the cache while this frame is searched
    double safe2


cdef struct Search:
    # what stays the same for all frames, and the scratch buffers
    const int64_t* i1
    const int64_t* i2
    Py_ssize_t na, nb, nbins
    double cutoff, cut2
    const double* edges
    int64_t xa, xb
    int64_t* counts
    float* aw
    float* bw
    int64_t* bcell
    int64_t* order
    int64_t* start
    int64_t* fill
    float* bs               # (3, bstride) b's wrapped coordinates sorted by cell (x row, y row, z row)
    Py_ssize_t bstride      # nb and the first look's padding (TS_LOOK_PAD)
    int64_t* bj             # (nb,) b's index of each sorted atom (for exclusion blocks)
    int32_t* cand           # (nb + TS_LOOK_PAD,) the candidates the first look leaves: positions,
    int32_t* cseg           # their segments
    float* cd2              # and their squared float32 distances
    ts_seg_t* seg           # an atom's segments of rows of neighbour cells
    double* segimg          # (9,) per segment: c0, c3, c4, c6, c7, c8 (the image's terms), xi, sy, sz
    double binscale         # nbins / (the range's width), for _bin_r
    const int32_t* tab      # (TAB_N,) or NULL: the bins of squared float32 distances (see _build_table)
    float tab_scale         # buckets per Å² of the table
    double tab_delta        # the largest delta (see _sorted_frame) the table allows for


cdef void _frame(const Frame* fr, Search* s) noexcept nogil:
    """Add one frame's pairs within the cut-off to ``s.counts``."""
    cdef const float* box = fr.box
    cdef const float* x = fr.x
    cdef double h[9]
    cdef float lengths[3]
    cdef float half[3]
    cdef float inv[3]
    cdef int64_t cell[3]
    cdef int64_t n0 = fr.n0, n1 = fr.n1, n2 = fr.n2, ncell = fr.n0 * fr.n1 * fr.n2
    cdef Py_ssize_t i, j, p, c, na = s.na, nb = s.nb
    cdef int k, oz, oy, ox
    cdef int64_t tz, ty, tx
    cdef double sz, sy, sx, r0, r1, r2, dx, dy, dz, d2, d, v, sc, ix, iy, iz
    cdef Py_ssize_t b
    cdef float* aw = s.aw
    cdef float* bw = s.bw
    for k in range(9):
        h[k] = box[k]
    for k in range(3):
        lengths[k] = fr.dims[k]
        half[k] = (<float>0.5) * fr.dims[k]
    if fr.pbc:
        for i in range(na):
            for k in range(3):
                aw[3 * i + k] = x[3 * s.i1[i] + k]
        for j in range(nb):
            for k in range(3):
                bw[3 * j + k] = x[3 * s.i2[j] + k]
        if fr.tric:
            _triclinic_pbc(aw, na, box)
            _triclinic_pbc(bw, nb, box)
        else:
            _ortho_pbc(aw, na, lengths)
            _ortho_pbc(bw, nb, lengths)
    else:   # _nsgrid_capped without a box: float32 coordinates less the shift, inside the pseudo-box
        for i in range(na):
            for k in range(3):
                aw[3 * i + k] = x[3 * s.i1[i] + k] - fr.shift[k]
        for j in range(nb):
            for k in range(3):
                bw[3 * j + k] = x[3 * s.i2[j] + k] - fr.shift[k]
    # counting sort of b's atoms by cell
    memset(s.start, 0, (ncell + 1) * sizeof(int64_t))
    for j in range(nb):
        _cell(bw[3 * j], bw[3 * j + 1], bw[3 * j + 2], h, n0, n1, n2, cell)
        s.bcell[j] = (cell[2] * n1 + cell[1]) * n0 + cell[0]
        s.start[s.bcell[j] + 1] += 1
    for c in range(ncell):
        s.start[c + 1] += s.start[c]
    for c in range(ncell):
        s.fill[c] = s.start[c]
    for j in range(nb):
        s.order[s.fill[s.bcell[j]]] = j
        s.fill[s.bcell[j]] += 1
    for k in range(3):
        inv[k] = <float>(1.0 / lengths[k])
    r0 = 1.0 / h[0]
    r1 = 1.0 / h[4]
    r2 = 1.0 / h[8]
    for i in range(na):
        _cell(aw[3 * i], aw[3 * i + 1], aw[3 * i + 2], h, n0, n1, n2, cell)
        # A neighbour cell across the box's face holds atoms whose near image is one box away:
        # that image (or, along an axis not split into cells, the nearest) is the first guess.
        for oz in range(-1 if n2 > 1 else 0, 2 if n2 > 1 else 1):
            tz = _wrap_cell(cell[2] + oz, n2, &sz)
            for oy in range(-1 if n1 > 1 else 0, 2 if n1 > 1 else 1):
                ty = _wrap_cell(cell[1] + oy, n1, &sy)
                for ox in range(-1 if n0 > 1 else 0, 2 if n0 > 1 else 1):
                    tx = _wrap_cell(cell[0] + ox, n0, &sx)
                    c = (tz * n1 + ty) * n0 + tx
                    for p in range(s.start[c], s.start[c + 1]):
                        j = s.order[p]
                        if s.xa > 0 and i // s.xa == j // s.xb:
                            continue
                        if fr.tric:
                            dx = <double>(aw[3 * i] - bw[3 * j])   # float32 difference, as in C
                            dy = <double>(aw[3 * i + 1] - bw[3 * j + 1])
                            dz = <double>(aw[3 * i + 2] - bw[3 * j + 2])
                            iz = sz if n2 > 1 else -rint(dz * r2)
                            iy = sy if n1 > 1 else -rint((dy + box[7] * iz) * r1)
                            ix = sx if n0 > 1 else -rint((dx + box[6] * iz + box[3] * iy) * r0)
                            d2 = _tric_min_d2(dx, dy, dz, box, ix, iy, iz, fr.safe2)
                        elif fr.bf:   # distance_array: unwrapped coordinates, minimum_image()
                            d2 = 0.0
                            for k in range(3):
                                v = <double>(x[3 * s.i2[j] + k] - x[3 * s.i1[i] + k])
                                if fr.pbc and lengths[k] > 1.1920929e-07:   # no box: plain differences
                                    sc = inv[k] * v
                                    v = lengths[k] * (sc - _round_half_away(sc))
                                d2 += v * v
                        else:   # nsgrid, orthorhombic: _minimum_image_ortho_lazy (none without a box)
                            d2 = 0.0
                            for k in range(3):
                                v = <double>(aw[3 * i + k] - bw[3 * j + k])
                                if fr.pbc:
                                    if v > half[k]:
                                        v -= lengths[k]
                                    elif v <= -half[k]:
                                        v += lengths[k]
                                d2 += v * v
                        if fr.bf:
                            d = sqrt(d2)
                            if not d <= s.cutoff:
                                continue
                        else:
                            if not d2 <= s.cut2:
                                continue
                            d = sqrt(d2)
                        b = _bin(d, s.edges, s.nbins)
                        if b >= 0:
                            s.counts[b] += 1


cdef bint _all_finite(const float* x, const Search* s) noexcept nogil:
    """Whether every coordinate of the two selections' atoms in frame ``x`` is finite (``v - v`` is 0 for a
    finite ``v``, NaN for NaN or an infinity)."""
    cdef float acc = 0
    cdef Py_ssize_t i
    for i in range(s.na):
        acc += (x[3 * s.i1[i]] - x[3 * s.i1[i]]) + (x[3 * s.i1[i] + 1] - x[3 * s.i1[i] + 1]) + \
            (x[3 * s.i1[i] + 2] - x[3 * s.i1[i] + 2])
    for i in range(s.nb):
        acc += (x[3 * s.i2[i]] - x[3 * s.i2[i]]) + (x[3 * s.i2[i] + 1] - x[3 * s.i2[i] + 1]) + \
            (x[3 * s.i2[i] + 2] - x[3 * s.i2[i] + 2])
    return acc == 0


cdef inline void _gather_wrapped(const Frame* fr, const int64_t* idx, Py_ssize_t n, float* out) noexcept nogil:
    """The coordinates of atoms ``idx[:n]`` gathered into ``out`` (n, 3) and wrapped into the box, as ``_frame``."""
    cdef const float* x = fr.x
    cdef float lengths[3]
    cdef Py_ssize_t i
    cdef int k
    for k in range(3):
        lengths[k] = fr.dims[k]
    for i in range(n):
        for k in range(3):
            out[3 * i + k] = x[3 * idx[i] + k]
    if fr.tric:
        _triclinic_pbc(out, n, fr.box)
    else:
        _ortho_pbc(out, n, lengths)


cdef inline void _set_cells(const Frame* fr, const double* rh, const double* dn, ts_cells_t* g) noexcept nogil:
    """``rdf_cells.h``'s parameters of a frame: its box, ``_triclinic_pbc``'s factors (the same expressions)
    and ``_cell_r``'s grid."""
    cdef const float* box = fr.box
    cdef double bi0 = 1.0 / <double>box[0]
    cdef double bi4 = 1.0 / <double>box[4]
    cdef double bi8 = 1.0 / <double>box[8]
    cdef double bi3 = (<double>(-box[3])) * bi0 * bi4
    cdef double mag
    cdef int k
    for k in range(9):
        g.box[k] = box[k]
    for k in range(3):
        g.len[k] = fr.dims[k]
        g.rh[k] = rh[k]
        g.dn[k] = dn[k]
    g.bi3 = bi3
    g.bi6 = (-bi3 * box[7] - box[6] * bi0) * bi8
    g.zf = (<double>box[7]) * bi8
    # the float32 bounds of rdf_cells.h's wrap lie within a few roundings (2**-24) of the double ones, each
    # of at most this size: a lane within 2**-16 of it of a bound is left to the scalar code
    mag = 0.0
    for k in range(9):
        mag += fabs(box[k])
    mag *= 1.0 + fabs(g.zf) + fabs(box[0]) * (fabs(g.bi3) + fabs(g.bi6))
    g.tol = <float>(mag * 1.52587890625e-05)
    g.h3 = box[3]
    g.h6 = box[6]
    g.h7 = box[7]
    g.n[0] = <int32_t>fr.n0
    g.n[1] = <int32_t>fr.n1
    g.n[2] = <int32_t>fr.n2


cdef inline int32_t _wrap_one(const Frame* fr, const float* lengths, const double* h, const double* rh,
                              const double* dn, float* x, float* y, float* z) noexcept nogil:
    """One atom of b wrapped by the scalar code (in place) and its cell."""
    cdef float t[3]
    cdef int64_t cell[3]
    t[0] = x[0]
    t[1] = y[0]
    t[2] = z[0]
    if fr.tric:
        _triclinic_pbc(t, 1, fr.box)
    else:
        _ortho_pbc(t, 1, lengths)
    x[0] = t[0]
    y[0] = t[1]
    z[0] = t[2]
    _cell_r(t[0], t[1], t[2], h, rh, dn, fr.n0, fr.n1, fr.n2, cell)
    return <int32_t>((cell[2] * fr.n1 + cell[1]) * fr.n0 + cell[0])


cdef Py_ssize_t _b_cells(const Frame* fr, Search* s, const double* h, const double* rh, const double* dn,
                         const float* lf, int32_t* bcell) noexcept nogil:
    """B's atoms gathered, wrapped (as ``_frame``) and given their cells (``_cell_r``'s) into ``bcell``, and
    counted by cell into ``s.start[c + 1]`` (zeroed by the caller). With AVX2 or AVX-512, four or eight
    at a time (csrc/rdf_cells.h), into ``s.bw`` as three rows x, y, z (an atom beyond the wrap's common path
    gets the cell -1 there, and is wrapped here); returns 1. Else one at a time, into ``s.bw`` as (nb, 3)
    (SSE2's vectors were slower than the scalar code); returns 3. The stride of a coordinate."""
    cdef ts_cells_t g
    cdef Py_ssize_t j, nb = s.nb
    cdef int64_t c
    cdef int64_t cell[3]
    cdef float* bw = s.bw
    if _LEVEL >= 2:
        _set_cells(fr, rh, dn, &g)
        ts_wrap_cells(_LEVEL, fr.tric, fr.x, s.i2, nb, &g, bw, bw + nb, bw + 2 * nb, bcell)
        for j in range(nb):
            c = bcell[j]
            if c < 0:
                c = _wrap_one(fr, lf, h, rh, dn, bw + j, bw + nb + j, bw + 2 * nb + j)
                bcell[j] = <int32_t>c
            s.start[c + 1] += 1
        return 1
    _gather_wrapped(fr, s.i2, s.nb, s.bw)
    for j in range(nb):
        _cell_r(bw[3 * j], bw[3 * j + 1], bw[3 * j + 2], h, rh, dn, fr.n0, fr.n1, fr.n2, cell)
        c = (cell[2] * fr.n1 + cell[1]) * fr.n0 + cell[0]
        bcell[j] = <int32_t>c
        s.start[c + 1] += 1
    return 3


cdef inline void _add_hit(double d2, Search* s, Py_ssize_t i, Py_ssize_t p) noexcept nogil:
    """A pair at squared distance ``d2`` (within the cut-off) of a's atom ``i`` and b's sorted atom ``p``
    binned, unless an exclusion block holds it."""
    cdef Py_ssize_t b
    if s.xa > 0 and i // s.xa == s.bj[p] // s.xb:
        return
    b = _bin_r(sqrt(d2), s.edges, s.nbins, s.binscale)
    if b >= 0:
        s.counts[b] += 1


cdef void _build_table(Search* s, double delta) noexcept nogil:
    """``s.tab``'s buckets: squared float32 distances (the first look's) of [u w, (u + 1) w), w = R / TAB_N,
    R a little over the largest ``near`` of a frame whose delta is at most ``delta``. A first look within
    2 delta (over sqrt(3) delta: delta bounds each of its coordinates' distance from the double one) and a
    relative 1e-6 (its float32 squares and sums, and the bucket's float32 index) of MDAnalysis's distance
    d puts d in [lo, hi]; where no bin edge (nor the cut-off) lies in it, every d there has one fate, the
    bucket's: its bin, or -1 (not counted). Else -2: the exact arithmetic decides."""
    cdef int32_t* tab = <int32_t*>s.tab
    cdef double r = (s.cutoff + 4.0 * delta) * (s.cutoff + 4.0 * delta) * (1.0 + 1e-5) * (1.0 + 1e-6)
    cdef double w = r / TAB_N
    cdef double a, b, lo, hi, d2
    cdef Py_ssize_t u, e, e0, e1
    for u in range(TAB_N):
        a = u * w * (1.0 - 1e-6)
        b = (u + 1) * w * (1.0 + 1e-6)
        lo = sqrt(a * (1.0 - 1e-6)) - 2.0 * delta
        hi = sqrt(b * (1.0 + 1e-6)) + 2.0 * delta
        if lo <= s.cutoff <= hi:
            tab[u] = -2
            continue
        e0 = 0   # the first edge at or past lo (bisection)
        e1 = s.nbins + 1
        while e0 < e1:
            e = (e0 + e1) // 2
            if s.edges[e] < lo:
                e0 = e + 1
            else:
                e1 = e
        if e0 <= s.nbins and s.edges[e0] <= hi:
            tab[u] = -2
            continue
        d2 = 0.5 * (a + b)
        tab[u] = <int32_t>(_bin_r(sqrt(d2), s.edges, s.nbins, s.binscale) if d2 <= s.cut2 else -1)
    s.tab_scale = <float>(TAB_N / r)
    s.tab_delta = delta


cdef inline bint _tab_hit(float v, Search* s, Py_ssize_t i, Py_ssize_t p) noexcept nogil:
    """Whether the table decides the pair of a's atom ``i`` and b's sorted atom ``p`` at squared float32
    distance ``v`` (the first look's): then it is binned (unless not counted, or an exclusion block holds
    it) and True; False where the exact arithmetic must decide."""
    cdef Py_ssize_t u = <Py_ssize_t>(v * s.tab_scale)
    cdef int32_t t
    if u >= TAB_N:
        return False
    t = s.tab[u]
    if t < -1:
        return False
    if t >= 0 and not (s.xa > 0 and i // s.xa == s.bj[p] // s.xb):
        s.counts[t] += 1
    return True


cdef void _sorted_frame(const Frame* fr, Search* s) noexcept nogil:
    """``_frame``'s pairs and distances, found faster: a periodic box searched on a grid (no brute
    force), split into ``fr.k`` cells per cut-off along every axis (``2k + 1`` or more cells each).

    B's wrapped coordinates are copied in cell order, so that the atoms of a row of neighbour cells
    lie side by side, and each row is scanned in one loop with its box image fixed (the image a
    row's wrapped cells add is the first guess ``_frame`` makes).  Each candidate's distance is
    ``_frame``'s own expression, term for term (an image's multiples of the box vectors are exact),
    so the pairs within the cut-off and their distances are the same bits; only fewer candidates
    far outside the cut-off are looked at (finer cells), and more cheaply.

    A candidate within the cut-off whose float32 first look lies far enough from every bin edge
    (``s.tab``, see ``_build_table``) is binned from that look: MDAnalysis's distance is in the same
    bin; the others are computed as ``_frame`` computes them. B's atoms are wrapped and given their
    cells by ``_b_cells`` (vectorised where the CPU has AVX2), and the next frame's B atoms are fetched
    into the cache while A's atoms are searched (``fr.ahead``).
    """
    cdef const float* box = fr.box
    cdef double h[9]
    cdef double rh[3]
    cdef double dn[3]
    cdef float half[3]
    cdef double lengths[3]
    cdef int64_t n0 = fr.n0, n1 = fr.n1, n2 = fr.n2, ncell = fr.n0 * fr.n1 * fr.n2, kk = fr.k
    cdef Py_ssize_t i, j, p, c, pe, na = s.na, nb = s.nb
    cdef int64_t cx, cy, cz, tz, ty, lo, hi, row, seg
    cdef int oz, oy, k
    cdef int64_t xs[2]
    cdef int64_t xe[2]
    cdef double xi[2]
    cdef double sz, sy, dx, dy, dz, rz0, rz1, rz2, d2, v, safe2 = fr.safe2
    cdef double cut2 = s.cut2
    cdef double delta, reach
    cdef float near, far
    cdef float lf[3]
    cdef float ax, ay, az
    cdef float* aw = s.aw
    cdef float* bx = s.bs
    cdef float* by = s.bs + s.bstride
    cdef float* bz = s.bs + 2 * s.bstride
    cdef bint tric = fr.tric
    cdef bint tab
    cdef Py_ssize_t nc, t, nseg
    cdef double* img
    cdef int64_t cell[3]
    cdef float* px
    cdef float* py
    cdef float* pz
    cdef Py_ssize_t st
    cdef Py_ssize_t ahead_at = 0, ahead_step = (fr.ahead_bytes // na + 64) if na > 0 else 0
    cdef int32_t* bcell = <int32_t*>s.bcell
    _gather_wrapped(fr, s.i1, s.na, s.aw)
    for k in range(9):
        h[k] = box[k]
    for k in range(3):
        lengths[k] = fr.dims[k]
        half[k] = (<float>0.5) * fr.dims[k]
    # Bounds of the float32 look: each of its coordinates within delta of the double one (a rounding of
    # a box image and one of the sum, each under 2**-24 of the box's and the distance's size; 8 times
    # that), so a pair within the cut-off lands under `near` and one past the safe radius over `far`.
    reach = sqrt(safe2) + s.cutoff
    for k in range(9):
        reach += fabs(h[k])
    delta = reach * 4.76837158203125e-07   # 2**-21
    near = <float>((s.cutoff + 4.0 * delta) * (s.cutoff + 4.0 * delta) * (1.0 + 1e-5))
    far = <float>(0.0 if sqrt(safe2) <= 4.0 * delta else
                  (sqrt(safe2) - 4.0 * delta) * (sqrt(safe2) - 4.0 * delta) * (1.0 - 1e-5))
    tab = s.tab != NULL and delta <= s.tab_delta
    for k in range(3):
        lf[k] = fr.dims[k]
    rh[0] = 1.0 / h[0]
    rh[1] = 1.0 / h[4]
    rh[2] = 1.0 / h[8]
    dn[0] = <double>n0
    dn[1] = <double>n1
    dn[2] = <double>n2
    memset(s.start, 0, (ncell + 1) * sizeof(int64_t))
    st = _b_cells(fr, s, h, rh, dn, lf, bcell)
    px = s.bw
    py = s.bw + (nb if st == 1 else 1)
    pz = s.bw + (2 * nb if st == 1 else 2)
    # counting sort of b's atoms by cell, their coordinates copied in that order
    for c in range(ncell):
        s.start[c + 1] += s.start[c]
    for c in range(ncell):
        s.fill[c] = s.start[c]
    if st == 1:   # (the two layouts in two loops: a stride the compiler knows)
        for j in range(nb):
            c = bcell[j]
            p = s.fill[c]
            s.fill[c] = p + 1
            bx[p] = px[j]
            by[p] = py[j]
            bz[p] = pz[j]
    else:
        for j in range(nb):
            c = bcell[j]
            p = s.fill[c]
            s.fill[c] = p + 1
            bx[p] = px[3 * j]
            by[p] = py[3 * j]
            bz[p] = pz[3 * j]
    if s.xa > 0:   # b's index of each sorted atom: for the exclusion blocks only
        for c in range(ncell):
            s.fill[c] = s.start[c]
        for j in range(nb):
            c = bcell[j]
            s.bj[s.fill[c]] = j
            s.fill[c] += 1
    for i in range(na):
        # the next frame's b atoms fetched from memory meanwhile, a share at each atom of a
        while fr.ahead != NULL and ahead_at < (i + 1) * ahead_step and ahead_at < fr.ahead_bytes:
            ts_prefetch(fr.ahead + ahead_at)
            ahead_at += 64
        ax = aw[3 * i]
        ay = aw[3 * i + 1]
        az = aw[3 * i + 2]
        _cell_r(ax, ay, az, h, rh, dn, n0, n1, n2, cell)
        cx = cell[0]
        cy = cell[1]
        cz = cell[2]
        # the row's cells cx - k .. cx + k: one run of cells, or two where it wraps across the box
        lo = cx - kk
        hi = cx + kk
        if lo < 0:
            xs[0] = lo + n0
            xe[0] = n0
            xi[0] = 1.0
            xs[1] = 0
            xe[1] = hi + 1
            xi[1] = 0.0
            seg = 2
        elif hi >= n0:
            xs[0] = lo
            xe[0] = n0
            xi[0] = 0.0
            xs[1] = 0
            xe[1] = hi + 1 - n0
            xi[1] = -1.0
            seg = 2
        else:
            xs[0] = lo
            xe[0] = hi + 1
            xi[0] = 0.0
            seg = 1
        # the rows' segments, then one first look at all of them
        nseg = 0
        for oz in range(-kk, kk + 1):
            tz = _wrap_cell(cz + oz, n2, &sz)
            for oy in range(-kk, kk + 1):
                ty = _wrap_cell(cy + oy, n1, &sy)
                row = (tz * n1 + ty) * n0
                for k in range(seg):
                    p = s.start[row + xs[k]]
                    pe = s.start[row + xe[k]]
                    if p == pe:
                        continue
                    s.seg[nseg].p = p
                    s.seg[nseg].pe = pe
                    if tric:   # _tric_d2's terms: the image's multiples of the box vectors are exact
                        img = s.segimg + 9 * nseg
                        img[0] = h[0] * xi[k]
                        img[1] = h[3] * sy
                        img[2] = h[4] * sy
                        img[3] = h[6] * sz
                        img[4] = h[7] * sz
                        img[5] = h[8] * sz
                        img[6] = xi[k]
                        img[7] = sy
                        img[8] = sz
                        # a float32 first look: only the candidates it cannot place far inside the
                        # cut-off's and the safe radius's bounds are computed as _frame computes them
                        s.seg[nseg].f[0] = <float>(img[0] + img[1] + img[3])
                        s.seg[nseg].f[1] = <float>(img[2] + img[4])
                        s.seg[nseg].f[2] = <float>img[5]
                    nseg += 1
        if tric:
            # only the candidates that may lie within the cut-off (d2 <= near): a pair's image within the
            # cut-off lies in a neighbour cell, and each atom of b is met once, on the row of that image
            # (2k + 1 or more cells an axis); one with that row's image past the cut-off has none within it,
            # whatever its shortest image (looking at d2 >= far too cost 27 images each: 5x the search of
            # a 15 Å O-O RDF in a dodecahedron)
            nc = ts_look_tric(_LEVEL, ax, ay, az, s.seg, nseg, bx, by, bz, near, INFINITY, s.cand, s.cseg, s.cd2)
            for t in range(nc):   # the candidates it leaves: d2 <= near
                j = s.cand[t]
                if tab and s.cd2[t] < far and _tab_hit(s.cd2[t], s, i, j):
                    continue
                img = s.segimg + 9 * s.cseg[t]
                dx = <double>(ax - bx[j])   # float32 difference, as in C
                dy = <double>(ay - by[j])
                dz = <double>(az - bz[j])
                rz0 = ((dx + img[0]) + img[1]) + img[3]
                rz1 = (dy + img[2]) + img[4]
                rz2 = dz + img[5]
                d2 = rz0 * rz0 + rz1 * rz1 + rz2 * rz2
                if d2 >= safe2:   # not surely the shortest image: _frame's 27 images
                    d2 = _tric_min_d2(dx, dy, dz, box, img[6], img[7], img[8], 0.0)
                if d2 <= cut2:
                    _add_hit(d2, s, i, j)
        else:   # _minimum_image_ortho_lazy, per pair (the same image in float32)
            nc = ts_look_ortho(_LEVEL, ax, ay, az, half, lf, s.seg, nseg, bx, by, bz, near, NAN, s.cand, s.cseg,
                               s.cd2)
            for t in range(nc):   # the candidates it leaves: d2 <= near
                j = s.cand[t]
                if tab and _tab_hit(s.cd2[t], s, i, j):
                    continue
                v = <double>(ax - bx[j])
                if v > half[0]:
                    v -= lengths[0]
                elif v <= -half[0]:
                    v += lengths[0]
                d2 = v * v
                v = <double>(ay - by[j])
                if v > half[1]:
                    v -= lengths[1]
                elif v <= -half[1]:
                    v += lengths[1]
                d2 += v * v
                v = <double>(az - bz[j])
                if v > half[2]:
                    v -= lengths[2]
                elif v <= -half[2]:
                    v += lengths[2]
                d2 += v * v
                if d2 <= cut2:
                    _add_hit(d2, s, i, j)


def rdf_histogram(const float[:, :, ::1] x, const int64_t[::1] i1, const int64_t[::1] i2,
                  const int64_t[::1] frames, const float[:, ::1] box9, const float[:, ::1] dims,
                  const uint8_t[::1] triclinic, const uint8_t[::1] brute, const int64_t[:, ::1] ncells,
                  const double[::1] safe2, const uint8_t[::1] pbc, const float[:, ::1] shift, double cutoff,
                  const double[::1] edges, int64_t xa, int64_t xb, int64_t[::1] counts,
                  const int64_t[::1] kcell, uint8_t[::1] finite):
    """Add to ``counts`` the histogram of the pairs within ``cutoff`` in each of ``frames``, as ``InterRDF``.

    x (F, N, 3) float32 positions of a block; i1, i2: the atoms (indices into x's second axis,
    checked by the caller) of the two selections; frames: which of the F frames to do; per frame
    (F, ...): box9 (9,) float32 box vectors (MDAnalysis's ``triclinic_vectors``), dims (6,) float32,
    triclinic and brute (MDAnalysis's box type and method: brute force = ``distance_array``, else
    ``nsgrid``), ncells (3,) (1 where the box is too thin to split), safe2 (squared half smallest
    width), pbc (0: a frame without a box, searched as ``capped_distance(box=None)``: box9 and dims
    hold its orthorhombic pseudo-box, shift (3,) the float32 shift of its coordinates); xa, xb:
    exclusion block (0: none); kcell (F,): cells per cut-off of a frame searched by
    ``_sorted_frame`` (its ncells split that finely, 2 * kcell + 1 or more on every axis; a
    periodic grid search only), 0 for ``_frame``'s search; finite (F,) or empty: where given, a
    frame in which an atom of either selection has a NaN or infinite coordinate is set to 0 there
    and not searched. The GIL is released; Ctrl-C is looked for every ``SLICE`` seconds.
    """
    cdef Search s
    cdef Frame fr
    cdef Py_ssize_t nf = frames.shape[0], q = 0
    cdef int64_t f
    cdef double t0
    if counts.shape[0] != edges.shape[0] - 1:
        raise ValueError("counts must have one element per bin")
    if kcell.shape[0] != x.shape[0]:
        raise ValueError("kcell must have one element per frame")
    if finite.shape[0] not in (0, x.shape[0]):
        raise ValueError("finite must have one element per frame, or none")
    cdef bint check = finite.shape[0] > 0
    if nf == 0 or i1.shape[0] == 0 or i2.shape[0] == 0:
        return
    # the call's sizes, in loops over the arrays (numpy's calls on memoryviews cost more than a small
    # block's search): the most cells and cells per cut-off of a frame, and for the frames of the sorted
    # search the pairs expected within the cut-off per pair of atoms and the largest reach (_sorted_frame)
    cdef Py_ssize_t max_cells = 1, kmax = 1, g
    cdef double per_pair = 0.0, reach_max = 0.0, reach
    for g in range(ncells.shape[0]):
        max_cells = max(max_cells, ncells[g, 0] * ncells[g, 1] * ncells[g, 2])
        kmax = max(kmax, kcell[g])
    for q in range(nf):
        f = frames[q]
        if kcell[f] > 0 and pbc[f] and not brute[f]:
            per_pair += 4.18879 * cutoff ** 3 / fabs(<double>box9[f, 0] * box9[f, 4] * box9[f, 8])   # 4/3 pi r^3
            reach = sqrt(safe2[f]) + cutoff
            for g in range(9):
                reach += fabs(<double>box9[f, g])
            reach_max = max(reach_max, reach)
    q = 0
    if max_cells >= 2 ** 31 - 1 or i2.shape[0] >= 2 ** 31 - TS_LOOK_PAD:   # cells and candidates are int32
        raise ValueError(f"{max_cells} cells, {i2.shape[0]} atoms of the second selection: at most 2**31 - 17")
    aw = np.empty((i1.shape[0], 3), np.float32)
    bw = np.empty((i2.shape[0], 3), np.float32)
    bs = np.zeros((3, i2.shape[0] + TS_LOOK_PAD), np.float32)   # rows x, y, z
    ints = np.empty(3 * i2.shape[0] + 2 * (max_cells + 1), np.int64)
    cdef float[:, ::1] aw_v = aw
    cdef float[:, ::1] bw_v = bw
    cdef float[:, ::1] bs_v = bs
    cdef int64_t[::1] ints_v = ints
    cdef int32_t[::1] tab_v
    cdef double tab_delta
    s.i1 = &i1[0]
    s.i2 = &i2[0]
    s.na = i1.shape[0]
    s.nb = i2.shape[0]
    s.nbins = edges.shape[0] - 1
    s.cutoff = cutoff
    s.cut2 = cutoff * cutoff
    s.edges = &edges[0]
    s.binscale = s.nbins / (edges[s.nbins] - edges[0])
    s.xa = xa
    s.xb = xb
    s.counts = &counts[0]
    s.aw = &aw_v[0, 0]
    s.bw = &bw_v[0, 0]
    s.bcell = &ints_v[0]
    s.order = s.bcell + s.nb
    s.start = s.order + s.nb
    s.fill = s.start + max_cells + 1
    s.bj = s.fill + max_cells + 1
    s.bs = &bs_v[0, 0]
    s.bstride = bs.shape[1]
    cand = np.empty((2, bs.shape[1]), np.int32)   # the candidates' positions and segments
    cand_d2 = np.empty(bs.shape[1], np.float32)
    cdef int32_t[:, ::1] cand_v = cand
    cdef float[::1] cand_d2_v = cand_d2
    s.cand = &cand_v[0, 0]
    s.cseg = &cand_v[1, 0]
    s.cd2 = &cand_d2_v[0]
    cdef Py_ssize_t max_seg = 2 * (2 * kmax + 1) ** 2   # 2 segments a row at most
    segs = np.zeros(max_seg * sizeof(ts_seg_t), np.uint8)
    segimg = np.empty((max_seg, 9), np.float64)
    cdef uint8_t[::1] segs_v = segs
    cdef double[:, ::1] segimg_v = segimg
    s.seg = <ts_seg_t*>&segs_v[0]
    s.segimg = &segimg_v[0, 0]
    # the table of bins by squared distance, for the largest delta of the frames of the sorted search
    s.tab = NULL
    if <double>s.na * s.nb * per_pair >= TAB_MIN_PAIRS:
        tab = np.empty(TAB_N, np.int32)
        tab_v = tab
        s.tab = &tab_v[0]
        tab_delta = reach_max * 4.76837158203125e-07 * (1.0 + 1e-9)
        with nogil:
            _build_table(&s, tab_delta)
    # the span of atoms that b's lie in, fetched ahead where b's fill much of it and it fits in a cache
    cdef int64_t b_lo = i2[0], b_hi = i2[0]
    for g in range(s.nb):
        b_lo = min(b_lo, i2[g])
        b_hi = max(b_hi, i2[g])
    cdef bint ahead = (s.na >= AHEAD_MIN_A and b_hi - b_lo + 1 <= 8 * s.nb
                       and (b_hi - b_lo + 1) * 3 * <Py_ssize_t>sizeof(float) <= AHEAD_MAX)
    while q < nf:
        with nogil:
            t0 = _now()
            while q < nf:
                f = frames[q]
                fr.x = &x[f, 0, 0]
                fr.box = &box9[f, 0]
                fr.dims = &dims[f, 0]
                fr.tric = triclinic[f]
                fr.bf = brute[f]
                fr.n0 = ncells[f, 0]
                fr.n1 = ncells[f, 1]
                fr.n2 = ncells[f, 2]
                fr.safe2 = safe2[f]
                fr.pbc = pbc[f]
                fr.shift = &shift[f, 0]
                fr.k = kcell[f]
                fr.ahead = NULL
                fr.ahead_bytes = 0
                if ahead and q + 1 < nf:
                    fr.ahead = <const char*>&x[frames[q + 1], b_lo, 0]
                    fr.ahead_bytes = (b_hi - b_lo + 1) * 3 * sizeof(float)
                if check and not _all_finite(fr.x, &s):
                    finite[f] = 0
                elif fr.k > 0 and fr.pbc and not fr.bf:
                    _sorted_frame(&fr, &s)
                else:
                    _frame(&fr, &s)
                q += 1
                if _now() - t0 > SLICE:
                    break
        PyErr_CheckSignals()


def wrap_cells(const float[:, ::1] x, const int64_t[::1] idx, const float[::1] box9, const float[::1] dims,
               bint triclinic, const int64_t[::1] ncells):
    """Atoms ``idx`` of one frame ``x`` (N, 3) wrapped into the box and given their cells as the sorted search
    does with the second selection, at the vector width in use: ``(wrapped, cells)``, (n, 3) float32 and (n,)
    int32 (cells numbered (z * n1 + y) * n0 + x). box9 (9,) float32 box vectors, dims (6,), ncells (3,).
    For tests: the same bits as MDAnalysis's ``apply_PBC``, and the cells of ``_cell_r``."""
    cdef Search s
    cdef Frame fr
    cdef double h[9]
    cdef double rh[3]
    cdef double dn[3]
    cdef float lf[3]
    cdef Py_ssize_t n = idx.shape[0], st
    cdef int k
    if n == 0:
        return np.empty((0, 3), np.float32), np.empty(0, np.int32)
    for k in range(int(idx.shape[0])):
        if not 0 <= idx[k] < x.shape[0]:
            raise ValueError(f"atom indices must lie in [0, {x.shape[0]})")
    bw = np.empty((n, 3), np.float32)
    cells = np.empty(n, np.int32)
    start = np.zeros(int(np.prod(ncells)) + 1, np.int64)
    cdef float[:, ::1] bw_v = bw
    cdef int32_t[::1] cells_v = cells
    cdef int64_t[::1] start_v = start
    for k in range(9):
        h[k] = box9[k]
    for k in range(3):
        dn[k] = <double>ncells[k]
        lf[k] = dims[k]
    rh[0] = 1.0 / h[0]
    rh[1] = 1.0 / h[4]
    rh[2] = 1.0 / h[8]
    fr.x = &x[0, 0]
    fr.box = &box9[0]
    fr.dims = &dims[0]
    fr.tric = triclinic
    fr.n0 = ncells[0]
    fr.n1 = ncells[1]
    fr.n2 = ncells[2]
    s.i2 = &idx[0]
    s.nb = n
    s.bw = &bw_v[0, 0]
    s.start = &start_v[0]
    with nogil:
        st = _b_cells(&fr, &s, h, rh, dn, lf, &cells_v[0])
    return (np.ascontiguousarray(bw.reshape(3, n).T) if st == 1 else bw), cells
