# cython: language_level=3
"""The compiled gather of a local file descriptor (:mod:`trajscale.storage.pread`; compiled ahead of time,
GIL released).

For every frame: ``pread`` each atom run into a small row buffer (tens of KB,
so it stays in L1/L2), then gather the asked atoms from it into the output
while it is still in cache. The GIL is taken back every ``SLICE`` seconds to look
for Ctrl-C.
"""

from libc.errno cimport errno, EINTR
from libc.stdint cimport int64_t
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from posix.types cimport off_t
from cpython.exc cimport PyErr_CheckSignals

cdef extern from "<unistd.h>" nogil:
    ssize_t pread(int fd, void* buf, size_t count, off_t offset)

cdef double SLICE = 0.05


cdef inline double _now() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return t.tv_sec + 1e-9 * t.tv_nsec


cdef inline bint _read_all(int fd, char* ptr, int64_t nbytes, int64_t offset) noexcept nogil:
    """Read ``nbytes`` at ``offset`` into ``ptr``; False on an error or the end of the file."""
    cdef int64_t done = 0
    cdef ssize_t got
    while done < nbytes:
        got = pread(fd, ptr + done, <size_t>(nbytes - done), <off_t>(offset + done))
        if got < 0 and errno == EINTR:
            continue
        if got <= 0:
            return False
        done += got
    return True


cdef inline bint _frame(int fd, int64_t at, const int64_t* runs, Py_ssize_t n_runs, const int64_t* index,
                        Py_ssize_t n_index, float* row, float* dest) noexcept nogil:
    """One frame: its runs into ``row`` (or straight into ``dest`` without ``index``), then the gather."""
    cdef Py_ssize_t r, k
    cdef const float* src
    cdef char* base = <char*>(row if n_index else dest)
    for r in range(n_runs):
        if not _read_all(fd, base + runs[3 * r + 1] * 12, runs[3 * r + 2] * 12, at + runs[3 * r]):
            return False
    for k in range(n_index):
        src = row + 3 * index[k]
        dest[3 * k] = src[0]
        dest[3 * k + 1] = src[1]
        dest[3 * k + 2] = src[2]
    return True


def pread_gather(int fd, const int64_t[::1] frame_offsets, const int64_t[:, ::1] runs, const int64_t[::1] index,
                 float[:, ::1] row, float[:, :, ::1] out):
    """Frame ``f``'s atom runs from byte ``frame_offsets[f]`` on; ``out[f]`` takes atoms ``index`` of them.

    ``runs`` holds ``(byte offset in the frame, first column, columns)`` per run, read
    side by side into ``row``; with ``index`` empty the runs go straight into ``out[f]``.
    Returns -1, or the first frame that could not be read whole (the caller falls back).
    """
    cdef Py_ssize_t n = frame_offsets.shape[0], f = 0, r, columns = 0, width
    cdef int64_t failed = -1
    cdef double t0
    cdef bint gather = index.shape[0] > 0
    if out.shape[0] < n or out.shape[2] != 3 or runs.shape[1] != 3:
        raise ValueError("out must be (frames, atoms, 3) and runs (runs, 3)")
    for r in range(runs.shape[0]):
        if runs[r, 1] < 0 or runs[r, 2] < 0:
            raise ValueError("runs must have non-negative columns")
        columns = max(columns, runs[r, 1] + runs[r, 2])
    width = row.shape[0] if gather else out.shape[1]
    if columns > width:
        raise ValueError(f"the runs need {columns} columns, the buffer has {width}")
    for r in range(index.shape[0]):
        if not 0 <= index[r] < row.shape[0]:
            raise ValueError("index outside the row buffer")
    if gather and index.shape[0] != out.shape[1]:
        raise ValueError("out must have one atom per index")
    if n == 0 or out.shape[1] == 0:
        return -1
    cdef const int64_t* runs_p = &runs[0, 0] if runs.shape[0] else NULL
    cdef const int64_t* index_p = &index[0] if gather else NULL
    cdef float* row_p = &row[0, 0] if gather else NULL
    while f < n and failed < 0:
        with nogil:
            t0 = _now()
            while f < n:
                if not _frame(fd, frame_offsets[f], runs_p, runs.shape[0], index_p, index.shape[0], row_p,
                              &out[f, 0, 0]):
                    failed = f
                    break
                f += 1
                if _now() - t0 > SLICE:
                    break
        PyErr_CheckSignals()
    return failed
