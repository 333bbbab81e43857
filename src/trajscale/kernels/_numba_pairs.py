"""numba cell list for RDF histograms, with MDAnalysis's arithmetic (imported only where numba is installed).

``InterRDF`` histograms the distances that ``capped_distance`` returns; a pair that
moves across a bin edge by one rounding changes a count, so these kernels repeat
MDAnalysis's float32 wrapping (``_triclinic_pbc``/``_ortho_pbc`` of
``calc_distances.h``), its float32 coordinate differences, its double-precision
minimum image and its inclusion test,
and NumPy's histogram binning. Only the search differs: a cell list over the box
coordinates of the second selection, built once per frame, all frames of a block
in one call.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _ortho_pbc(c, box):
    """``_ortho_pbc``: (N, 3) float32 coordinates into the orthorhombic box (3,) float32, in place."""
    inv0, inv1, inv2 = 1.0 / np.float64(box[0]), 1.0 / np.float64(box[1]), 1.0 / np.float64(box[2])
    inv = (inv0, inv1, inv2)
    for i in range(c.shape[0]):
        for j in range(3):
            crd = c[i, j]
            if crd < 0.0:
                crd += box[j]
                if crd < 0.0:
                    s = np.floor(c[i, j] * inv[j])
                    c[i, j] -= np.float32(s) * box[j]
                    if c[i, j] < 0.0:
                        c[i, j] += box[j]
                else:
                    c[i, j] = crd
            if crd >= box[j]:
                crd -= box[j]
                if crd >= box[j]:
                    s = np.floor(c[i, j] * inv[j])
                    c[i, j] -= np.float32(s) * box[j]
                    if c[i, j] >= box[j]:
                        c[i, j] -= box[j]
                else:
                    c[i, j] = crd


@njit(cache=True)
def _triclinic_pbc(c, box):
    """``_triclinic_pbc``: (N, 3) float32 coordinates into the triclinic box (9,) float32 (row vectors), in place."""
    bi0 = 1.0 / np.float64(box[0])
    bi4 = 1.0 / np.float64(box[4])
    bi8 = 1.0 / np.float64(box[8])
    bi3 = np.float64(-box[3]) * bi0 * bi4
    bi6 = (-bi3 * box[7] - box[6] * bi0) * bi8
    bi7 = np.float64(-box[7]) * bi4 * bi8
    zf = np.float64(box[7]) * bi8
    for i in range(c.shape[0]):
        msr = False
        c0, c1, c2 = c[i, 0], c[i, 1], c[i, 2]
        if c2 < 0.0:
            c0 += box[6]
            c1 += box[7]
            c2 += box[8]
            if c2 < 0.0:
                msr = True
        if c2 >= box[8]:
            c0 -= box[6]
            c1 -= box[7]
            c2 -= box[8]
            if c2 >= box[8]:
                msr = True
        if not msr:
            lb = c2 * zf
            ub = lb + box[4]
            if c1 < lb:
                c0 += box[3]
                c1 += box[4]
                if c1 < lb:
                    msr = True
            if c1 >= ub:
                c0 -= box[3]
                c1 -= box[4]
                if c1 >= ub:
                    msr = True
            if not msr:
                lb = -(c1 * bi3 + c2 * bi6) * box[0]
                ub = lb + box[0]
                if c0 < lb:
                    c0 += box[0]
                    if c0 < lb:
                        msr = True
                if c0 >= ub:
                    c0 -= box[0]
                    if c0 >= ub:
                        msr = True
        if not msr:
            c[i, 0], c[i, 1], c[i, 2] = c0, c1, c2
            continue
        s = np.float32(np.floor(c[i, 2] * bi8))
        c[i, 2] -= s * box[8]
        c[i, 1] -= s * box[7]
        c[i, 0] -= s * box[6]
        s = np.float32(np.floor(c[i, 1] * bi4 + c[i, 2] * bi7))
        c[i, 1] -= s * box[4]
        c[i, 0] -= s * box[3]
        s = np.float32(np.floor(c[i, 0] * bi0 + c[i, 1] * bi3 + c[i, 2] * bi6))
        c[i, 0] -= s * box[0]
        c0, c1, c2 = c[i, 0], c[i, 1], c[i, 2]
        if c2 < 0.0:
            c0 += box[6]
            c1 += box[7]
            c2 += box[8]
        if c2 >= box[8]:
            c0 -= box[6]
            c1 -= box[7]
            c2 -= box[8]
        lb = c2 * zf
        ub = lb + box[4]
        if c1 < lb:
            c0 += box[3]
            c1 += box[4]
        if c1 >= ub:
            c0 -= box[3]
            c1 -= box[4]
        lb = -(c1 * bi3 + c2 * bi6) * box[0]
        ub = lb + box[0]
        if c0 < lb:
            c0 += box[0]
        if c0 >= ub:
            c0 -= box[0]
        c[i, 0], c[i, 1], c[i, 2] = c0, c1, c2


@njit(cache=True, inline="always")
def _tric_d2(dx, dy, dz, box, ix, iy, iz):
    """Squared length of image (ix, iy, iz) of (dx, dy, dz), in ``minimum_image_triclinic``'s operation order."""
    rx = dx + box[0] * ix
    ry0 = rx + box[3] * iy
    ry1 = dy + box[4] * iy
    rz0 = ry0 + box[6] * iz
    rz1 = ry1 + box[7] * iz
    rz2 = dz + box[8] * iz
    return rz0 * rz0 + rz1 * rz1 + rz2 * rz2


@njit(cache=True, inline="always")
def _tric_min_d2(dx, dy, dz, box, ix, iy, iz, safe2):
    """``minimum_image_triclinic``'s squared distance, given a first guess (ix, iy, iz) of the image.

    A guess shorter than half the box's smallest width is the shortest of all images
    (and among MDAnalysis's 27): its value, computed in MDAnalysis's order, is the one
    MDAnalysis returns. Otherwise MDAnalysis's 27-image loop.
    """
    if abs(ix) <= 1 and abs(iy) <= 1 and abs(iz) <= 1:
        d2 = _tric_d2(dx, dy, dz, box, ix, iy, iz)
        if d2 < safe2:
            return d2
    best = 3.4028234663852886e38   # FLT_MAX
    for jx in range(-1, 2):
        for jy in range(-1, 2):
            for jz in range(-1, 2):
                best = min(best, _tric_d2(dx, dy, dz, box, jx, jy, jz))
    return best


@njit(cache=True, inline="always")
def _round_half_away(s):
    """C's ``round``: halves away from zero."""
    t = np.trunc(s)
    if abs(s - t) >= 0.5:
        t += 1.0 if s > 0 else -1.0
    return t


@njit(cache=True, inline="always")
def _bin(d, edges, n):
    """``np.histogram``'s bin of ``d`` over equal-width ``edges`` (n + 1), or -1 outside the range."""
    lo, hi = edges[0], edges[n]
    if not (d >= lo and d <= hi):
        return -1
    k = int(((d - lo) / (hi - lo)) * n)
    if k == n:
        k -= 1
    if d < edges[k]:
        k -= 1
    elif d >= edges[k + 1] and k != n - 1:
        k += 1
    return k


@njit(cache=True, inline="always")
def _cell(x, y, z, h, n0, n1, n2, out):
    """Cell (3,) of a point from its box coordinates (clamped into the grid)."""
    s2 = z / h[2, 2]
    s1 = (y - s2 * h[2, 1]) / h[1, 1]
    s0 = (x - s1 * h[1, 0] - s2 * h[2, 0]) / h[0, 0]
    out[0] = min(max(int(np.floor(s0 * n0)), 0), n0 - 1)
    out[1] = min(max(int(np.floor(s1 * n1)), 0), n1 - 1)
    out[2] = min(max(int(np.floor(s2 * n2)), 0), n2 - 1)


@njit(cache=True)
def rdf_histogram(x, i1, i2, frames, box9, dims, triclinic, brute, ncells, safe2, cutoff, edges, xa, xb, counts):
    """Add to ``counts`` the histogram of the pairs within ``cutoff`` in each of ``frames``, as ``InterRDF``.

    x (F, N, 3) float32 positions of a block; i1, i2: the atoms (indices into x's second axis) of
    the two selections; frames: which of the F frames to do; per frame (F, ...): box9 (9,) float32
    box vectors (MDAnalysis's ``triclinic_vectors``), dims (6,) float32, triclinic and brute
    (MDAnalysis's box type and method: brute force = ``distance_array``, else ``nsgrid``), ncells (3,)
    (1 where the box is too thin to split), safe2 (squared half smallest width); xa, xb: exclusion
    block (0: none).
    """
    nbins = len(edges) - 1
    cut2 = cutoff * cutoff
    na, nb = len(i1), len(i2)
    aw = np.empty((na, 3), np.float32)
    bw = np.empty((nb, 3), np.float32)
    cell = np.empty(3, np.int64)
    bcell = np.empty(nb, np.int64)
    order = np.empty(nb, np.int64)
    half = np.empty(3, np.float32)
    lengths = np.empty(3, np.float32)
    for f in frames:
        box = box9[f]
        h = box.reshape(3, 3).astype(np.float64)
        n0, n1, n2 = ncells[f, 0], ncells[f, 1], ncells[f, 2]
        tric, bf, s2f = triclinic[f], brute[f], safe2[f]
        for i in range(na):
            for k in range(3):
                aw[i, k] = x[f, i1[i], k]
        for j in range(nb):
            for k in range(3):
                bw[j, k] = x[f, i2[j], k]
        for k in range(3):
            lengths[k] = dims[f, k]
            half[k] = np.float32(0.5) * dims[f, k]
        if tric:
            _triclinic_pbc(aw, box)
            _triclinic_pbc(bw, box)
        else:
            _ortho_pbc(aw, lengths)
            _ortho_pbc(bw, lengths)
        # counting sort of b's atoms by cell
        ncell = n0 * n1 * n2
        start = np.zeros(ncell + 1, np.int64)
        for j in range(nb):
            _cell(bw[j, 0], bw[j, 1], bw[j, 2], h, n0, n1, n2, cell)
            bcell[j] = (cell[2] * n1 + cell[1]) * n0 + cell[0]
            start[bcell[j] + 1] += 1
        for c in range(ncell):
            start[c + 1] += start[c]
        fill = start[:-1].copy()
        for j in range(nb):
            order[fill[bcell[j]]] = j
            fill[bcell[j]] += 1
        inv = (np.float32(1.0 / lengths[0]), np.float32(1.0 / lengths[1]), np.float32(1.0 / lengths[2]))
        r0, r1, r2 = 1.0 / h[0, 0], 1.0 / h[1, 1], 1.0 / h[2, 2]
        for i in range(na):
            _cell(aw[i, 0], aw[i, 1], aw[i, 2], h, n0, n1, n2, cell)
            for oz in range(-1 if n2 > 1 else 0, 2 if n2 > 1 else 1):
                # A neighbour cell across the box's face holds atoms whose near image is one box away:
                # that image (or, along an axis not split into cells, the nearest) is the first guess.
                tz, sz = cell[2] + oz, 0.0
                if tz < 0:
                    tz, sz = tz + n2, 1.0
                elif tz >= n2:
                    tz, sz = tz - n2, -1.0
                for oy in range(-1 if n1 > 1 else 0, 2 if n1 > 1 else 1):
                    ty, sy = cell[1] + oy, 0.0
                    if ty < 0:
                        ty, sy = ty + n1, 1.0
                    elif ty >= n1:
                        ty, sy = ty - n1, -1.0
                    for ox in range(-1 if n0 > 1 else 0, 2 if n0 > 1 else 1):
                        tx, sx = cell[0] + ox, 0.0
                        if tx < 0:
                            tx, sx = tx + n0, 1.0
                        elif tx >= n0:
                            tx, sx = tx - n0, -1.0
                        c = (tz * n1 + ty) * n0 + tx
                        for p in range(start[c], start[c + 1]):
                            j = order[p]
                            if xa > 0 and i // xa == j // xb:
                                continue
                            if tric:
                                dx = np.float64(aw[i, 0] - bw[j, 0])   # float32 difference, as in C
                                dy = np.float64(aw[i, 1] - bw[j, 1])
                                dz = np.float64(aw[i, 2] - bw[j, 2])
                                iz = sz if n2 > 1 else -np.rint(dz * r2)
                                iy = sy if n1 > 1 else -np.rint((dy + box[7] * iz) * r1)
                                ix = sx if n0 > 1 else -np.rint((dx + box[6] * iz + box[3] * iy) * r0)
                                d2 = _tric_min_d2(dx, dy, dz, box, ix, iy, iz, s2f)
                            elif bf:   # distance_array: unwrapped coordinates, minimum_image()
                                d2 = 0.0
                                for k in range(3):
                                    v = np.float64(x[f, i2[j], k] - x[f, i1[i], k])
                                    if lengths[k] > 1.1920929e-07:
                                        s = inv[k] * v
                                        v = lengths[k] * (s - _round_half_away(s))
                                    d2 += v * v
                            else:   # nsgrid, orthorhombic: _minimum_image_ortho_lazy
                                d2 = 0.0
                                for k in range(3):
                                    v = np.float64(aw[i, k] - bw[j, k])
                                    if v > half[k]:
                                        v -= lengths[k]
                                    elif v <= -half[k]:
                                        v += lengths[k]
                                    d2 += v * v
                            if bf:
                                d = np.sqrt(d2)
                                if not d <= cutoff:
                                    continue
                            else:
                                if not d2 <= cut2:
                                    continue
                                d = np.sqrt(d2)
                            k = _bin(d, edges, nbins)
                            if k >= 0:
                                counts[k] += 1
