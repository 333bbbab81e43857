"""Blosc-compressed chunks decompressed straight into the reader's buffer.

HDF5 reads a filtered chunk by decompressing it into a buffer of its own (the
chunk cache, or a temporary one) and copying the selection out of it.  For
delta-coded positions (``h5md.codecs``), read in whole chunk-aligned rows
anyway, that copy is a quarter of the read.  Here the chunk's stored bytes
come from ``H5Dread_chunk`` and Blosc - the library hdf5plugin's own filter
runs, called through its public ``blosc_decompress_ctx`` - writes them into the
caller's buffer, where the decoder finds them still in cache.

Only a dataset whose one filter is Blosc and whose chunks hold whole frames
takes this path; a chunk never written, one whose filter was skipped or a
size that does not match is read through HDF5 as before.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os

import h5py
import numpy as np

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
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


class BloscChunks:
    """Whole-frame Blosc chunks of one dataset, decompressed into a caller's buffer."""

    def __init__(self, ds: h5py.Dataset, decompress) -> None:
        self.ds = ds
        self.chunk_frames = ds.chunks[0]
        self.frame_shape = ds.shape[1:]
        self._decompress = decompress

    @classmethod
    def of(cls, ds: h5py.Dataset) -> BloscChunks | None:
        """The reader of ``ds``, or None when HDF5 must read it (another filter, chunks that split a frame)."""
        if not ds.chunks or tuple(ds.chunks[1:]) != tuple(ds.shape[1:]) or ds.is_virtual:
            return None
        dcpl = ds.id.get_create_plist()
        if dcpl.get_nfilters() != 1 or dcpl.get_filter(0)[0] != BLOSC_ID:
            return None
        fn = _decompress()
        return None if fn is None else cls(ds, fn)

    def read_chunk(self, k: int, out: np.ndarray) -> bool:
        """Chunk ``k`` (frames ``k * chunk_frames`` on; the last chunk is stored whole too) into ``out``.

        False when HDF5 must read it (never written, its filter skipped, or not the expected size).
        """
        try:
            mask, data = self.ds.id.read_direct_chunk((k * self.chunk_frames,) + (0,) * len(self.frame_shape))
        except (OSError, KeyError, ValueError, RuntimeError):   # unallocated: HDF5 gives its fill value
            return False
        if mask:
            return False
        want = self.chunk_frames * int(np.prod(self.frame_shape)) * out.itemsize
        if not (out.flags.c_contiguous and out.shape[1:] == self.frame_shape and len(out) >= self.chunk_frames):
            raise ValueError("the chunk buffer must hold a whole chunk of frames, C-contiguous")
        got = self._decompress(data, out.ctypes.data, want, 1)
        if got != want:
            log.debug("%s chunk %d: Blosc gave %d bytes, %d expected", self.ds.name, k, got, want)
            return False
        return True
