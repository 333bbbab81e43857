# cython: language_level=3
"""Frames in chunks with the GIL released, and a look for Ctrl-C after each chunk (shared by the kernels).

A kernel states only its per-frame body::

    cdef Chunks ch = chunks(n_frames, work_per_frame)
    while next_chunk(&ch):
        with nogil:
            for f in range(ch.start, ch.stop):
                ...

Only inline functions and a struct: nothing of this module is imported at run time.
"""

from cpython.exc cimport PyErr_CheckSignals


cdef enum:
    CHUNK_WORK = 1 << 21   # work per GIL-free chunk (pairs or atoms: a few milliseconds), then a signal check


cdef struct Chunks:
    Py_ssize_t start, stop   # the current chunk of frames [start, stop)
    Py_ssize_t end           # frames in all
    Py_ssize_t step          # frames per chunk


cdef inline Chunks chunks(Py_ssize_t n_frames, Py_ssize_t work_per_frame) noexcept nogil:
    """Chunks of ``n_frames`` frames, each about ``CHUNK_WORK`` / ``work_per_frame`` frames (at least 1)."""
    return frame_chunks(n_frames, max(1, CHUNK_WORK // max(work_per_frame, 1)))


cdef inline Chunks frame_chunks(Py_ssize_t n_frames, Py_ssize_t step) noexcept nogil:
    """Chunks of ``n_frames`` frames, ``step`` frames each."""
    cdef Chunks c
    c.start = 0
    c.stop = 0
    c.end = n_frames
    c.step = step
    return c


cdef inline bint next_chunk(Chunks* c) except -1:
    """Moves ``c`` to its next chunk, after a look for Ctrl-C if a chunk was done (the GIL held):
    True, or False past the last frame; a signal's exception (KeyboardInterrupt) propagates."""
    if c.stop > c.start:
        PyErr_CheckSignals()
    c.start = c.stop
    if c.start >= c.end:
        return False
    c.stop = min(c.end, c.start + c.step)
    return True
