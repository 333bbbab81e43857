# distutils: sources = src/trajscale/sources/csrc/xdrfile.c src/trajscale/sources/csrc/xdrfile_xtc.c
# distutils: include_dirs = src/trajscale/sources/csrc
"""XTC files read without importing MDAnalysis: GROMACS's xdrfile library, compiled in.

MDAnalysis and MDTraj decode XTC with the same C library (xdrfile, BSD-2, by Erik
Lindahl and David van der Spoel; ``csrc/`` holds MDAnalysis's copy, with its 64-bit
seek), so frames are the same bits as MDAnalysis's.  Reading through it here spares
each process that reads an XTC chain the import of MDAnalysis and SciPy (~0.5 s of
a 1 s run).  A frame is decoded only as far as the last selected atom: XTC
decodes atoms in order, and a protein usually comes before its solvent, so a
protein selection in a solvated system decodes a tenth of each frame.  Frame offsets are found by reading each frame's fixed-size header and
its byte count (no coordinates decoded), and every frame's header is checked
before it is decoded, so a part changed after the scan is an error, not an
overrun.  The GIL is released while a frame decodes; Ctrl-C is seen between frames.
"""

from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport errno
from libc.stdint cimport int64_t, uint8_t
from libc.stdio cimport FILE, SEEK_END, SEEK_SET, fclose, fopen, fread
from libc.string cimport strerror

import os

import numpy as np

cdef extern from "stdio.h" nogil:
    int fseeko(FILE *stream, long offset, int whence)
    long ftello(FILE *stream)

cdef extern from "xdrfile.h" nogil:
    ctypedef struct XDRFILE:
        pass
    ctypedef float rvec[3]
    enum:
        exdrOK
        exdrENDOFFILE
    XDRFILE *xdrfile_open(const char *path, const char *mode)
    int xdrfile_close(XDRFILE *xfp)
    int xdrfile_read_float(float *ptr, int ndata, XDRFILE *xfp)
    int xdrfile_decompress_coord_float_prefix(float *ptr, int *ncoord, int n_want, float *precision, XDRFILE *xfp)
    int xdr_seek(XDRFILE *xd, int64_t pos, int whence)

cdef extern from "xdrfile_xtc.h" nogil:
    int xtc_header(XDRFILE *xd, int *natoms, int *step, float *time, int bRead)

cdef enum:
    MAGIC = 1995
    HEADER = 92          # header (16) + box (36) + natoms (4) + precision, ranges, smallidx, byte count (36)
    SHORT_HEADER = 56    # fewer than 10 atoms: header, box, natoms, then plain floats


class XTCFormatError(ValueError):
    """The file is not an XTC, or is cut short or damaged; the message names the frame and byte."""


cdef inline int _be32(const uint8_t *p) noexcept nogil:
    return <int>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3])


def scan(path):
    """``(n_atoms, offsets)`` of an XTC file: the byte offset of every frame, from the frames' headers.

    Raises
    ------
    OSError
        The file cannot be opened.
    XTCFormatError
        A frame does not start with XTC's magic number, has another atom count than
        the first, or ends past the end of the file (cut short).
    """
    cdef bytes name = os.fsencode(path)
    cdef FILE *fh = fopen(name, "rb")
    if fh == NULL:
        raise OSError(errno, strerror(errno).decode(), str(path))
    cdef uint8_t buf[HEADER]
    cdef long pos = 0, size = 0, frame_bytes, file_size
    cdef Py_ssize_t n = 0, cap = 1024, got
    cdef int natoms, n_atoms = -1, magic
    cdef str problem = None
    offsets = np.empty(cap, np.int64)
    cdef int64_t[::1] out = offsets
    try:
        with nogil:
            fseeko(fh, 0, SEEK_END)
            file_size = ftello(fh)
        while pos < file_size:
            with nogil:
                fseeko(fh, pos, SEEK_SET)
                got = <Py_ssize_t>fread(buf, 1, HEADER, fh)
            if got < 8:
                problem = f"frame {n} at byte {pos} is cut short (the file ends at byte {file_size})"
                break
            magic, natoms = _be32(buf), _be32(buf + 4)
            if magic != MAGIC:
                problem = (f"no XTC frame at byte {pos} (frame {n}): magic number {magic}, not {MAGIC}"
                           if n else f"not an XTC file (magic number {magic}, not {MAGIC})")
                break
            if n_atoms < 0:
                n_atoms = natoms
            elif natoms != n_atoms:
                problem = f"frame {n} at byte {pos} has {natoms} atoms, frame 0 has {n_atoms}"
                break
            if natoms < 10:
                frame_bytes = SHORT_HEADER + 12 * natoms
            elif got < HEADER:
                frame_bytes = file_size + 1   # its header alone is cut short
            else:
                frame_bytes = HEADER + ((_be32(buf + HEADER - 4) + 3) & ~3)
            if pos + frame_bytes > file_size:
                problem = f"frame {n} at byte {pos} is cut short (the file ends at byte {file_size})"
                break
            if n == cap:
                cap *= 2
                offsets = np.resize(offsets, cap)
                out = offsets
            out[n] = pos
            n += 1
            pos += frame_bytes
    finally:
        fclose(fh)
    if problem is not None:
        raise XTCFormatError(problem)
    return max(n_atoms, 0), offsets[:n].copy()


cdef class XTCFile:
    """An XTC file open for reading frames at known offsets (from :func:`scan`).

    Parameters
    ----------
    path
        The file.
    n_atoms
        Atoms per frame (every frame read is checked against it).
    """

    cdef XDRFILE *_xd
    cdef readonly str path
    cdef readonly int n_atoms
    cdef float[:, ::1] _frame

    def __cinit__(self, path, int n_atoms):
        self._xd = NULL
        self.path = str(path)
        self.n_atoms = n_atoms
        cdef bytes name = os.fsencode(path)
        self._xd = xdrfile_open(name, "r")
        if self._xd == NULL:
            raise OSError(errno, strerror(errno).decode(), self.path)
        self._frame = np.empty((max(n_atoms, 1), 3), np.float32)

    def __dealloc__(self):
        if self._xd != NULL:
            xdrfile_close(self._xd)
            self._xd = NULL

    def close(self):
        if self._xd != NULL:
            xdrfile_close(self._xd)
            self._xd = NULL

    def read(self, const int64_t[::1] offsets, const int64_t[::1] frames, sel, float[:, :, ::1] out,
             float[:, :, ::1] edges, double[::1] time, int64_t[::1] step, float scale):
        """Decode ``frames`` (indices into ``offsets``) into rows of ``out`` (times ``scale``).

        ``sel`` (intp indices, or None for every atom) picks the atoms copied into
        ``out[i]``; ``edges[i]`` gets the box vectors as stored, ``time[i]`` and
        ``step[i]`` the frame's header.  Raises :class:`XTCFormatError` naming the
        frame that cannot be read.
        """
        if self._xd == NULL:
            raise ValueError(f"{self.path}: read from a closed XTCFile")
        cdef Py_ssize_t i, j, c, n = frames.shape[0], n_sel
        cdef int n_want = self.n_atoms   # decoded atoms: up to the last selected one
        cdef const Py_ssize_t[::1] pick
        cdef bint every = sel is None
        if not every:
            pick = sel
            n_sel = pick.shape[0]
            if n_sel and (np.min(sel) < 0 or np.max(sel) >= self.n_atoms):
                raise IndexError(f"{self.path}: atom indices outside 0..{self.n_atoms - 1}")
            n_want = int(np.max(sel)) + 1 if n_sel else 0
        else:
            n_sel = self.n_atoms
        if out.shape[0] < n or out.shape[1] != n_sel or edges.shape[0] < n or time.shape[0] < n or step.shape[0] < n:
            raise ValueError(f"{self.path}: output rows do not fit {n} frames of {n_sel} atoms")
        cdef int rc, natoms, st, size
        cdef float t, prec
        cdef int64_t k
        cdef float *dst
        cdef float[:, ::1] frame = self._frame
        for i in range(n):
            k = frames[i]
            if k < 0 or k >= offsets.shape[0]:
                raise IndexError(f"{self.path}: frame {k} of {offsets.shape[0]}")
            dst = &out[i, 0, 0] if every and n_sel else &frame[0, 0]
            with nogil:
                rc = xdr_seek(self._xd, offsets[k], SEEK_SET)
                if rc == exdrOK:
                    rc = xtc_header(self._xd, &natoms, &st, &t, 1)
                if rc == exdrOK and natoms != self.n_atoms:
                    rc = -2
                if rc == exdrOK and xdrfile_read_float(&edges[i, 0, 0], 9, self._xd) != 9:
                    rc = exdrENDOFFILE
                if rc == exdrOK:
                    size = self.n_atoms
                    if xdrfile_decompress_coord_float_prefix(dst, &size, n_want, &prec, self._xd) != self.n_atoms:
                        rc = -3
                if rc == exdrOK:
                    if every:
                        for j in range(n_sel):
                            for c in range(3):
                                out[i, j, c] = out[i, j, c] * scale
                    else:
                        for j in range(n_sel):
                            for c in range(3):
                                out[i, j, c] = frame[pick[j], c] * scale
            if rc == -2:
                raise XTCFormatError(f"frame {k} has {natoms} atoms, not {self.n_atoms} (changed since it was scanned?)")
            if rc != exdrOK:
                raise XTCFormatError(f"cannot read frame {k} at byte {offsets[k]} (cut short or damaged?)")
            time[i] = t
            step[i] = st
            PyErr_CheckSignals()
