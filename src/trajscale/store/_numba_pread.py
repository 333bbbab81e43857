"""numba loop behind :mod:`trajscale.store.direct` (imported only where numba is installed).

For every frame: ``pread`` each atom run into a small row buffer (tens of KB,
so it stays in L1/L2), then gather the asked atoms from it into the output
while it is still in cache.  The GIL is released for the whole loop.
``pread`` is declared by its C name (not through a ctypes pointer) so the
compiled loop is cached on disk like the other kernels.
"""

from __future__ import annotations

from numba import njit, types

# ssize_t pread(int fd, void *buf, size_t count, off_t offset); the pointer travels as an integer.
_pread = types.ExternalFunction("pread", types.int64(types.int32, types.uint64, types.uint64, types.int64))


@njit(cache=True, nogil=True, inline="always")
def _read_all(fd, ptr, nbytes, offset):
    """Read ``nbytes`` at ``offset`` into ``ptr``; False on an error or the end of the file."""
    done = 0
    while done < nbytes:
        got = _pread(fd, ptr + done, nbytes - done, offset + done)
        if got <= 0:
            return False
        done += got
    return True


@njit("int64(int32, int64[::1], int64[:, ::1], int64[::1], float32[:, ::1], float32[:, :, ::1])",
      cache=True, nogil=True)
def pread_gather(fd, frame_offsets, runs, index, row, out):
    """Frame ``f``'s atom runs from byte ``frame_offsets[f]`` on; ``out[f]`` takes atoms ``index`` of them.

    ``runs`` holds ``(byte offset in the frame, first column, columns)`` per run, read
    side by side into ``row``; with ``index`` empty the runs go straight into ``out[f]``.
    Returns -1, or the first frame that could not be read whole (the caller falls back).
    """
    gather = index.shape[0] > 0
    frame_bytes = out.shape[1] * 12
    for f in range(frame_offsets.shape[0]):
        ptr = row.ctypes.data if gather else out.ctypes.data + f * frame_bytes
        for r in range(runs.shape[0]):
            if not _read_all(fd, ptr + runs[r, 1] * 12, runs[r, 2] * 12, frame_offsets[f] + runs[r, 0]):
                return f
        if gather:
            for k in range(index.shape[0]):
                c = index[k]
                out[f, k, 0] = row[c, 0]
                out[f, k, 1] = row[c, 1]
                out[f, k, 2] = row[c, 2]
    return -1
