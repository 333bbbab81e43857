"""numba loop behind :func:`trajscale.store.codecs.decode_deltas` (imported only where numba is installed).

One pass per frame (undo the zigzag, running sum along atoms, scale) instead of
NumPy's five passes over the slab: the decode then keeps up with zstd.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def decode_deltas(raw, q, out):
    n_frames, n_atoms, n_dim = raw.shape
    for f in range(n_frames):
        for c in range(n_dim):
            acc = np.int32(0)
            for a in range(n_atoms):
                u = raw[f, a, c]
                acc += np.int32(u >> np.uint32(1)) ^ -np.int32(u & np.uint32(1))
                out[f, a, c] = acc * q


@njit(cache=True, nogil=True)
def decode_refs16(raw, pos, off, center, q, out):
    """``store.codecs.Deltas``: frame rows ``raw`` (frames, 3 x atoms) of uint16, atom ``a``'s
    triple at ``pos[a]``, its reference ``off[a]`` atoms back (0: none).

    The last three atoms' values stay in registers (an atom refers at most three
    back), and ``pos`` is looked up rather than counted: a running cursor per group
    put a dependency on the previous atom into every iteration (~1.5x slower).
    Indices read from an array are made unsigned, so numba does not test them for
    negative (wrap-around) values: 13 % of the decode.  Values are scaled in
    float64, so each is the float32 nearest ``i * q`` (as ``decode_deltas``, and
    as ``quantize`` rounds floats; float32 arithmetic would be 8 % faster and 1 ulp
    off for a quarter of the values).
    """
    n_frames = raw.shape[0]
    n_atoms = pos.shape[0]
    c0, c1, c2 = center[0], center[1], center[2]
    for f in range(n_frames):
        rf = raw[f]
        of = out[f]
        a10 = a11 = a12 = a20 = a21 = a22 = a30 = a31 = a32 = np.int32(0)
        for a in range(n_atoms):
            o = off[a]
            if o == 1:
                r0 = a10
                r1 = a11
                r2 = a12
            elif o == 2:
                r0 = a20
                r1 = a21
                r2 = a22
            elif o == 3:
                r0 = a30
                r1 = a31
                r2 = a32
            else:
                r0 = r1 = r2 = np.int32(0)
            p = np.uintp(pos[a])
            u0 = np.int32(rf[p])
            u1 = np.int32(rf[p + np.uintp(1)])
            u2 = np.int32(rf[p + np.uintp(2)])
            v0 = np.int32(np.int16(r0 + ((u0 >> 1) ^ -(u0 & 1))))
            v1 = np.int32(np.int16(r1 + ((u1 >> 1) ^ -(u1 & 1))))
            v2 = np.int32(np.int16(r2 + ((u2 >> 1) ^ -(u2 & 1))))
            a30 = a20
            a31 = a21
            a32 = a22
            a20 = a10
            a21 = a11
            a22 = a12
            a10 = v0
            a11 = v1
            a12 = v2
            of[a, 0] = (v0 + c0) * q
            of[a, 1] = (v1 + c1) * q
            of[a, 2] = (v2 + c2) * q
