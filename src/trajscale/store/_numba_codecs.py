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
