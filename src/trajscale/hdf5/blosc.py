"""Blosc-compressed chunks decompressed straight into the reader's buffer.

HDF5 decompresses a filtered chunk into a buffer of its own and copies the selection out: for delta-coded
positions, read in whole chunks anyway, a quarter of the read. Here the chunk reader hands the stored bytes to
hdf5plugin's Blosc (its public ``blosc_decompress_ctx``), which writes into the caller's buffer, still in cache
for the decoder. Only a dataset whose one filter is Blosc takes this path; anything else is HDF5's.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import h5py

log = logging.getLogger(__name__)

#: HDF5's registered id of the Blosc filter (hdf5plugin.Blosc)
BLOSC_ID = 32001


@functools.cache
def _decompress():
    """``blosc_decompress_ctx`` from hdf5plugin's Blosc filter library, or None."""
    try:
        import hdf5plugin

        lib = ctypes.CDLL(os.path.join(os.path.dirname(hdf5plugin.__file__), "plugins", "libh5blosc.so"))
        fn = lib.blosc_decompress_ctx
    except (ImportError, OSError, AttributeError) as exc:
        log.debug("Blosc chunks go through HDF5: %s", exc)
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def blosc_decompressor(ds: h5py.Dataset) -> Callable[[bytes, np.ndarray], bool] | None:
    """``decompress(raw, out) -> bool`` for ``ds``'s chunks, or None when Blosc is not its one filter, or absent."""
    dcpl = ds.id.get_create_plist()
    if dcpl.get_nfilters() != 1 or dcpl.get_filter(0)[0] != BLOSC_ID:
        return None
    fn = _decompress()
    if fn is None:
        return None

    def decompress(raw, out: np.ndarray) -> bool:
        if not out.flags.c_contiguous:
            raise ValueError("the chunk buffer must be C-contiguous")
        src = np.frombuffer(raw, np.uint8)   # (the stored bytes where they are: no copy)
        got = fn(src.ctypes.data, out.ctypes.data, out.nbytes, 1)
        if got != out.nbytes:
            log.debug("%s: a Blosc chunk gave %d bytes, %d expected", ds.name, got, out.nbytes)
            return False
        return True

    return decompress
