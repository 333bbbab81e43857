"""numba loop behind :mod:`trajscale.store.direct_write` (imported only where numba is installed).

Rows (frames) go to their byte addresses with ``pwrite``; rows whose addresses
follow each other (the frames of one chunk) go in one call.  The GIL is
released for the whole loop.  ``pwrite`` is declared by its C name (not through
a ctypes pointer) so the compiled loop is cached on disk like the other kernels.
"""

from __future__ import annotations

from numba import njit, types

# ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset); the pointer travels as an integer.
_pwrite = types.ExternalFunction("pwrite", types.int64(types.int32, types.uint64, types.uint64, types.int64))


@njit(cache=True, nogil=True, inline="always")
def _write_all(fd, ptr, nbytes, offset):
    """Write ``nbytes`` from ``ptr`` at ``offset``; False on an error (a short write is continued)."""
    done = 0
    while done < nbytes:
        got = _pwrite(fd, ptr + done, nbytes - done, offset + done)
        if got <= 0:
            return False
        done += got
    return True


@njit("int64(int32, int64[::1], uint8[:, ::1])", cache=True, nogil=True)
def pwrite_rows(fd, row_offsets, rows):
    """Row ``i`` of ``rows`` (its bytes) at file offset ``row_offsets[i]``.

    Returns -1, or the first row that could not be written (the caller raises).
    """
    n = row_offsets.shape[0]
    row_bytes = rows.shape[1]
    base = rows.ctypes.data
    i = 0
    while i < n:
        j = i + 1
        while j < n and row_offsets[j] == row_offsets[j - 1] + row_bytes:   # one chunk: one call
            j += 1
        if not _write_all(fd, base + i * row_bytes, (j - i) * row_bytes, row_offsets[i]):
            return i
        i = j
    return -1
