"""numba loop behind :func:`trajscale.store.codecs.decode_deltas` (imported only where numba is installed).

One pass per frame (undo the zigzag, running sum along atoms, scale) instead of
NumPy's five passes over the slab: the decode then keeps up with zstd.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


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



@intrinsic
def _load_u64(typingctx, arr, byte_offset):
    """The 8 bytes at ``byte_offset`` of ``arr``'s data, unaligned (a triple of uint16 and 2 more)."""
    sig = types.uint64(arr, types.uintp)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        at = builder.gep(builder.bitcast(data, ir.IntType(8).as_pointer()), [args[1]])
        return builder.load(builder.bitcast(at, ir.IntType(64).as_pointer()), align=1)

    return sig, codegen


# Three int16 lanes of a uint64 (x in bits 0-15, y 16-31, z 32-47), worked on together (SWAR).
_LANES = np.uint64(0xFFFF_FFFF_FFFF)
_LOW_BITS = np.uint64(0x0000_0001_0001_0001)
_LOW_15 = np.uint64(0x0000_7FFF_7FFF_7FFF)
_HIGH_BIT = np.uint64(0x0000_8000_8000_8000)
_U16 = np.uint64(0xFFFF)


@njit(cache=True, nogil=True)
def decode_refs16(flat, n_frames, pos, off, table, out):
    """``store.codecs.Deltas``: ``n_frames`` frame rows of 3 x atoms uint16 in ``flat`` (which must
    hold 4 more bytes after the last row: an atom's triple is loaded as 8 bytes), atom ``a``'s
    triple at ``pos[a]``, its reference ``off[a]`` atoms back (0: none); ``table[axis, step & 0xFFFF]``
    is the float32 of a step count.

    An atom's three values travel as int16 lanes of one uint64: one load, the zigzag and the
    sum modulo 2^16 for the three at once, one register per remembered atom (an atom refers
    at most three back).  ``pos`` is looked up rather than counted (a cursor per group put a
    dependency on the previous atom into every iteration), unsigned so that numba does not
    test it for wrap-around; the values come from the table (the float32 nearest i x q, as
    ``decode_deltas`` and ``quantize`` give) instead of three conversions and a multiply.
    Together 1.3x faster than a loop over the three coordinates.
    """
    n_atoms = pos.shape[0]
    row = np.uintp(3 * n_atoms)
    tx = table[0]
    ty = table[1]
    tz = table[2]
    for f in range(n_frames):
        of = out[f]
        base = np.uintp(f) * row
        h1 = h2 = h3 = np.uint64(0)
        for a in range(n_atoms):
            o = off[a]
            if o == 1:
                r = h1
            elif o == 2:
                r = h2
            elif o == 3:
                r = h3
            else:
                r = np.uint64(0)
            u = _load_u64(flat, (base + np.uintp(pos[a])) * np.uintp(2)) & _LANES
            d = ((u >> np.uint64(1)) & _LOW_15) ^ ((u & _LOW_BITS) * _U16)   # zigzag, per lane
            v = ((r & _LOW_15) + (d & _LOW_15)) ^ ((r ^ d) & _HIGH_BIT)       # lane sums modulo 2^16
            h3 = h2
            h2 = h1
            h1 = v
            of[a, 0] = tx[v & _U16]
            of[a, 1] = ty[(v >> np.uint64(16)) & _U16]
            of[a, 2] = tz[(v >> np.uint64(32)) & _U16]


@njit(cache=True, nogil=True)
def encode_refs16(values, q, center, pos, off, out):
    """Inverse of :func:`decode_refs16` into ``out`` (frames, 3 x atoms) uint16: the steps
    ``rint(value / q) - centre`` of each atom less those of its reference, zigzag-coded modulo
    2^16, at the atom's stored position.  Returns the flat index of the first value that is
    not finite or lies beyond 32767 steps, else -1 (``out`` is then incomplete).
    """
    n_frames, n_atoms, _ = values.shape
    for f in range(n_frames):
        vf = values[f]
        of = out[f]
        for a in range(n_atoms):
            o = off[a]
            p = np.uintp(pos[a])
            for c in range(3):
                s = np.rint(np.float64(vf[a, c]) / q) - center[c]
                if not abs(s) <= 32767.0:
                    return (f * n_atoms + a) * 3 + c
                r = 0.0
                if o:
                    r = np.rint(np.float64(vf[a - o, c]) / q) - center[c]
                d = np.int16(np.int32(s - r))   # |s - r| < 2^16: the int16 cast takes it modulo 2^16
                of[p + np.uintp(c)] = np.uint16((d << np.int16(1)) ^ (d >> np.int16(15)))
    return -1
