# distutils: sources = src/trajscale/sources/csrc/xdrfile.c src/trajscale/sources/csrc/xdrfile_xtc.c src/trajscale/sources/csrc/xdrfile_trr.c
# distutils: include_dirs = src/trajscale/sources/csrc
"""XTC and TRR files read without importing MDAnalysis: GROMACS's xdrfile library, compiled in.

MDAnalysis and MDTraj decode XTC and TRR with the same C library (xdrfile, BSD-2,
by Erik Lindahl and David van der Spoel; ``csrc/`` holds MDAnalysis's copy, with
its 64-bit seek), so frames are the same bits as MDAnalysis's.  Reading through it
here spares each process that reads GROMACS trajectories the import of MDAnalysis
and SciPy (~0.5 s of a 1 s run).

* An XTC frame is decoded only as far as the last selected atom: XTC decodes
  atoms in order, and a protein usually comes before its solvent, so a protein
  selection in a solvated system decodes a tenth of each frame.
* Frame offsets are found from the frames' headers and sizes (no coordinates
  read), and every frame's header is checked before the frame is read into a
  buffer, so a file changed after its scan is an error, not an overrun.
* The GIL is released while a frame is read; Ctrl-C is seen between frames.
"""

from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport errno
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.stdio cimport FILE, SEEK_END, SEEK_SET, fclose, fopen, fread
from libc.string cimport memcpy, strerror

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
    int64_t xdr_tell(XDRFILE *xd)

cdef extern from "xdrfile_xtc.h" nogil:
    int xtc_header(XDRFILE *xd, int *natoms, int *step, float *time, int bRead)

cdef extern from "xdrfile_trr.h" nogil:
    ctypedef struct t_trnheader:
        int ir_size, e_size, box_size, vir_size, pres_size, top_size, sym_size, x_size, v_size, f_size
        int natoms, step
        double td
    int do_trnheader(XDRFILE *xd, int bRead, t_trnheader *sh)
    int read_trr(XDRFILE *xd, int natoms, int *step, float *t, float *lam, rvec *box, rvec *x, rvec *v,
                 rvec *f, int *has_prop)

cdef enum:
    MAGIC = 1995
    HEADER = 92          # header (16) + box (36) + natoms (4) + precision, ranges, smallidx, byte count (36)
    SHORT_HEADER = 56    # fewer than 10 atoms: header, box, natoms, then plain floats


class XDRFormatError(ValueError):
    """The file is not an XTC/TRR, or is cut short or damaged; the message names the frame and byte."""


cdef inline int _be32(const uint8_t *p) noexcept nogil:
    return <int>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3])


cdef inline float _be_float(const uint8_t *p) noexcept nogil:
    cdef uint32_t bits = <uint32_t>_be32(p)
    cdef float f
    memcpy(&f, &bits, 4)
    return f


def scan_xtc(path, Py_ssize_t max_frames=-1):
    """``(n_atoms, offsets, fields, steps, times)`` of an XTC file, from its frames' headers: the byte
    offset, step and time of every frame (the first ``max_frames`` if not negative); fields is
    ``("position",)``, as :func:`scan_trr` gives a TRR's.

    Raises
    ------
    OSError
        The file cannot be opened.
    XDRFormatError
        A frame does not start with XTC's magic number, has another atom count than
        the first, or ends past the end of the file (cut short).
    """
    cdef bytes name = os.fsencode(path)
    cdef FILE *fh = fopen(name, "rb")
    if fh == NULL:
        raise OSError(errno, strerror(errno).decode(), str(path))
    cdef uint8_t buf[HEADER]
    cdef long pos = 0, frame_bytes, file_size
    cdef Py_ssize_t n = 0, got
    cdef int natoms, n_atoms = -1, magic
    cdef str problem = None
    offsets, steps, times = [], [], []
    try:
        with nogil:
            fseeko(fh, 0, SEEK_END)
            file_size = ftello(fh)
        while pos < file_size and n != max_frames:
            with nogil:
                fseeko(fh, pos, SEEK_SET)
                got = <Py_ssize_t>fread(buf, 1, HEADER, fh)
            if got < 16:
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
            offsets.append(pos)
            steps.append(_be32(buf + 8))
            times.append(_be_float(buf + 12))   # the header's float32, as xtc_header reads it
            n += 1
            pos += frame_bytes
    finally:
        fclose(fh)
    if problem is not None:
        raise XDRFormatError(problem)
    return max(n_atoms, 0), np.array(offsets, np.int64), ("position",), np.array(steps, np.int64), \
        np.array(times, np.float64)


cdef class _XDRFile:
    """An XDR file (XTC or TRR) open for reading frames at known offsets.

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

    def __cinit__(self, path, int n_atoms, *args):
        self._xd = NULL
        self.path = str(path)
        self.n_atoms = n_atoms
        cdef bytes name = os.fsencode(path)
        self._xd = xdrfile_open(name, "r")
        if self._xd == NULL:
            raise OSError(errno, strerror(errno).decode(), self.path)

    cdef void _close(self) noexcept:
        if self._xd != NULL:
            xdrfile_close(self._xd)
            self._xd = NULL

    def __dealloc__(self):
        self._close()

    def close(self):
        self._close()

    def _atoms_read(self, sel) -> int:
        """How many atoms a read copies out (``sel``'s, or every atom), checked: open, indices in range."""
        if self._xd == NULL:
            raise ValueError(f"{self.path}: read from a closed {type(self).__name__}")
        if sel is None:
            return self.n_atoms
        if len(sel) and (np.min(sel) < 0 or np.max(sel) >= self.n_atoms):
            raise IndexError(f"{self.path}: atom indices outside 0..{self.n_atoms - 1}")
        return len(sel)


cdef class XTCFile(_XDRFile):
    """An XTC file open for reading frames at known offsets (from :func:`scan_xtc`)."""

    cdef float[:, ::1] _frame

    def __cinit__(self, path, int n_atoms, *args):
        self._frame = np.empty((max(n_atoms, 1), 3), np.float32)

    def read(self, const int64_t[::1] offsets, const int64_t[::1] frames, sel, dict rows,
             float[:, :, ::1] edges, double[::1] time, int64_t[::1] step, dict scale):
        """Decode ``frames`` (indices into ``offsets``) into rows of ``rows["position"]`` (times
        ``scale["position"]``), as :meth:`TRRFile.read` reads its fields.

        ``sel`` (intp indices, or None for every atom) picks the atoms copied into
        each row; ``edges[i]`` gets the box vectors as stored, ``time[i]`` and
        ``step[i]`` the frame's header.  Raises :class:`XDRFormatError` naming the
        frame that cannot be read.
        """
        if set(rows) != {"position"}:
            raise ValueError(f"{self.path}: an XTC holds positions only, not {', '.join(sorted(rows))}")
        cdef float[:, :, ::1] out = rows["position"]
        cdef float factor = scale["position"]
        cdef Py_ssize_t i, j, c, n = frames.shape[0], n_sel = self._atoms_read(sel)
        cdef int n_want = self.n_atoms   # decoded atoms: up to the last selected one
        cdef const Py_ssize_t[::1] pick
        cdef bint every = sel is None
        if not every:
            pick = sel
            n_want = int(np.max(sel)) + 1 if n_sel else 0
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
                                out[i, j, c] = out[i, j, c] * factor
                    else:
                        for j in range(n_sel):
                            for c in range(3):
                                out[i, j, c] = frame[pick[j], c] * factor
            if rc == -2:
                raise XDRFormatError(f"frame {k} has {natoms} atoms, not {self.n_atoms} (changed since it was scanned?)")
            if rc != exdrOK:
                raise XDRFormatError(f"cannot read frame {k} at byte {offsets[k]} (cut short or damaged?)")
            time[i] = t
            step[i] = st
            PyErr_CheckSignals()


#: Fields of a TRR frame, in read_trr's order; field i is flagged by bit 1 << i of its has_prop.
TRR_FIELDS = ("position", "velocity", "force")


def scan_trr(path, Py_ssize_t max_frames=-1):
    """``(n_atoms, offsets, fields, steps, times)`` of a TRR file: every frame's byte offset, step and
    time (the first ``max_frames`` if not negative) from its header and sizes, and the fields
    (``"position"``, ``"velocity"``, ``"force"``) its first frame holds.

    Raises
    ------
    OSError
        The file cannot be opened.
    XDRFormatError
        A frame header cannot be read (not a TRR, or damaged), has another atom count than the
        first, or the frame ends past the end of the file (cut short).
    """
    cdef bytes name = os.fsencode(path)
    cdef XDRFILE *xd = xdrfile_open(name, "r")
    if xd == NULL:
        raise OSError(errno, strerror(errno).decode(), str(path))
    cdef t_trnheader sh
    cdef int64_t pos = 0, file_size, frame_bytes
    cdef int rc, n_atoms = -1, has = 0
    cdef Py_ssize_t n = 0
    cdef str problem = None
    found, steps, times = [], [], []
    try:
        with nogil:
            xdr_seek(xd, 0, SEEK_END)
            file_size = xdr_tell(xd)
        while pos < file_size and n != max_frames:
            with nogil:
                xdr_seek(xd, pos, SEEK_SET)
                rc = do_trnheader(xd, 1, &sh)
            if rc != exdrOK:
                problem = (f"frame {n} at byte {pos}: no TRR frame header (cut short or damaged?)" if n
                           else "not a TRR file (no TRR frame header at its start)")
                break
            if n_atoms < 0:
                n_atoms = sh.natoms
                has = (sh.x_size > 0) | (sh.v_size > 0) << 1 | (sh.f_size > 0) << 2
            elif sh.natoms != n_atoms:
                problem = f"frame {n} at byte {pos} has {sh.natoms} atoms, frame 0 has {n_atoms}"
                break
            frame_bytes = (xdr_tell(xd) - pos) + sh.ir_size + sh.e_size + sh.box_size + sh.vir_size + \
                sh.pres_size + sh.top_size + sh.sym_size + sh.x_size + sh.v_size + sh.f_size
            if pos + frame_bytes > file_size:
                problem = f"frame {n} at byte {pos} is cut short (the file ends at byte {file_size})"
                break
            found.append(pos)
            steps.append(sh.step)
            times.append(<float> sh.td)   # as read_trr gives it (float)
            n += 1
            pos += frame_bytes
    finally:
        xdrfile_close(xd)
    if problem is not None:
        raise XDRFormatError(problem)
    fields = tuple(f for i, f in enumerate(TRR_FIELDS) if has & (1 << i))
    return max(n_atoms, 0), np.array(found, np.int64), fields, np.array(steps, np.int64), \
        np.array(times, np.float64)


cdef class TRRFile(_XDRFile):
    """A TRR file open for reading frames at known offsets (from :func:`scan_trr`)."""

    cdef float[:, :, ::1] _frame   # position, velocity, force of one whole frame

    def __cinit__(self, path, int n_atoms, *args):
        self._frame = np.empty((3, max(n_atoms, 1), 3), np.float32)

    def read(self, const int64_t[::1] offsets, const int64_t[::1] frames, sel, dict out,
             float[:, :, ::1] edges, double[::1] time, int64_t[::1] step, dict scale):
        """Read ``frames`` (indices into ``offsets``) into rows of ``out[field]`` (times ``scale[field]``).

        ``out`` maps ``"position"``, ``"velocity"``, ``"force"`` (those wanted) to arrays of
        ``(frames, atoms, 3)``; ``sel`` (intp indices, or None for every atom) picks the atoms.
        Raises :class:`XDRFormatError` naming a frame that cannot be read or lacks a wanted field.
        """
        cdef Py_ssize_t i, j, c, n = frames.shape[0], n_sel = self._atoms_read(sel)
        cdef const Py_ssize_t[::1] pick
        cdef bint every = sel is None
        if not every:
            pick = sel
        cdef int want = 0, f_i
        cdef float *dst[3]   # out[field]'s rows, C-contiguous (checked by the memoryview)
        cdef float factor[3]
        cdef float[:, :, ::1] rows
        for f_i, name in enumerate(TRR_FIELDS):
            dst[f_i] = NULL
            if name in out:
                rows = out[name]
                if rows.shape[0] < n or rows.shape[1] != n_sel or rows.shape[2] != 3:
                    raise ValueError(f"{self.path}: output rows do not fit {n} frames of {n_sel} atoms")
                if n and n_sel:
                    dst[f_i] = &rows[0, 0, 0]
                factor[f_i] = scale[name]
                want |= 1 << f_i
        if edges.shape[0] < n or time.shape[0] < n or step.shape[0] < n:
            raise ValueError(f"{self.path}: output rows do not fit {n} frames")
        cdef t_trnheader sh
        cdef int rc, st, has
        cdef float t, lam
        cdef int64_t k
        cdef float[:, :, ::1] frame = self._frame
        cdef rvec *bufs[3]
        for f_i in range(3):
            bufs[f_i] = NULL
            if want & (1 << f_i):
                bufs[f_i] = <rvec *> &frame[f_i, 0, 0]
        for i in range(n):
            k = frames[i]
            if k < 0 or k >= offsets.shape[0]:
                raise IndexError(f"{self.path}: frame {k} of {offsets.shape[0]}")
            edges[i, :, :] = 0
            with nogil:
                rc = xdr_seek(self._xd, offsets[k], SEEK_SET)
                if rc == exdrOK:
                    rc = do_trnheader(self._xd, 1, &sh)
                if rc == exdrOK and sh.natoms != self.n_atoms:
                    rc = -2
                if rc == exdrOK:
                    rc = xdr_seek(self._xd, offsets[k], SEEK_SET)
                if rc == exdrOK:
                    rc = read_trr(self._xd, self.n_atoms, &st, &t, &lam, <rvec *> &edges[i, 0, 0],
                                  bufs[0], bufs[1], bufs[2], &has)
                if rc == exdrOK and (has & want) != want:
                    rc = -4
                if rc == exdrOK:
                    for f_i in range(3):
                        if dst[f_i] != NULL:
                            for j in range(n_sel):
                                for c in range(3):
                                    dst[f_i][(i * n_sel + j) * 3 + c] = \
                                        frame[f_i, j if every else pick[j], c] * factor[f_i]
            if rc == -2:
                raise XDRFormatError(f"frame {k} has {sh.natoms} atoms, not {self.n_atoms} "
                                     "(changed since it was scanned?)")
            if rc == -4:
                missing = [f for b, f in enumerate(TRR_FIELDS) if want & (1 << b) and not has & (1 << b)]
                raise XDRFormatError(f"frame {k} has no {' or '.join(missing)} data")
            if rc != exdrOK:
                raise XDRFormatError(f"cannot read frame {k} at byte {offsets[k]} (cut short or damaged?)")
            time[i] = t
            step[i] = st
            PyErr_CheckSignals()

