# distutils: sources = src/trajscale/xdr/csrc/xdrfile.c src/trajscale/xdr/csrc/xdrfile_xtc.c src/trajscale/xdr/csrc/xdrfile_trr.c
# distutils: include_dirs = src/trajscale/xdr/csrc
"""XTC and TRR files read without importing MDAnalysis: GROMACS's xdrfile library, compiled in.

MDAnalysis and MDTraj decode XTC and TRR with the same C library (xdrfile, BSD-2,
by Erik Lindahl and David van der Spoel; ``csrc/`` holds MDAnalysis's copy, with
its 64-bit seek), so frames are the same bits as MDAnalysis's.  Reading through it
here spares each process that reads GROMACS trajectories the import of MDAnalysis
and SciPy (~0.5 s of a 1 s run).

* The XTC decoder is xdrfile's with the same reads and checks, about 4x faster: bits read
  64 at a time, each group's big number split by 64-bit division, the floats made (and
  scaled to Å) a chunk at a time (``csrc/README.md``); the same bits as MDAnalysis's.
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
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
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
    int xdrfile_decompress_coord_float_scaled(float *ptr, int *ncoord, int n_want, float *precision, float scale,
                                              XDRFILE *xfp)
    int xdr_seek(XDRFILE *xd, int64_t pos, int whence)
    int64_t xdr_tell(XDRFILE *xd)
    long long xdrfile_xtc_max_bytes(int natoms)
    int xdrfile_xtc_check_ranges(const int minint[3], const int maxint[3])
    enum:
        XTC_BAD_NATOMS
        XTC_BAD_PRECISION
        XTC_BAD_RANGE
        XTC_BAD_SMALLIDX
        XTC_BAD_BYTECOUNT
        XTC_BAD_BITS
        XTC_BAD_RUN
        XTC_NOMEM

cdef extern from "xdrfile_xtc.h" nogil:
    int xtc_header(XDRFILE *xd, int *natoms, int *step, float *time, int bRead)

cdef extern from "xdrfile_trr.h" nogil:
    ctypedef struct t_trnheader:
        int ir_size, e_size, box_size, vir_size, pres_size, top_size, sym_size, x_size, v_size, f_size
        int natoms, step
        double td
        const char *bad
    int do_trnheader(XDRFILE *xd, int bRead, t_trnheader *sh)
    int read_trr(XDRFILE *xd, int natoms, int *step, float *t, float *lam, rvec *box, rvec *x, rvec *v,
                 rvec *f, int *has_prop)

cdef enum:
    MAGIC = 1995
    TRR_MAGIC = 1993
    FIRSTIDX = 9         # xdrfile.c's magicints: the first and one past the last index a frame may use
    LASTIDX = 73
    HEADER = 92          # header (16) + box (36) + natoms (4) + precision, ranges, smallidx, byte count (36)
    SHORT_HEADER = 56    # fewer than 10 atoms: header, box, natoms, then plain floats


class XDRFormatError(ValueError):
    """The file is not an XTC/TRR, or is cut short or damaged; the message names the frame and byte.

    A scan's error also holds what came before the damage: ``n_atoms``, the ``offsets`` of the whole
    frames before it (an int64 array) and ``complete_bytes`` (where the last of them ends), so that a
    follower can analyse those frames before it says what it met.
    """

    def __init__(self, problem, n_atoms=0, offsets=None, complete_bytes=0, steps=None, times=None,
                 fields=None):
        super().__init__(problem)
        self.n_atoms, self.complete_bytes = n_atoms, complete_bytes
        self.offsets = np.zeros(0, np.int64) if offsets is None else offsets
        #: The whole frames' steps and times (as a scan gives them) and the fields the first frame holds.
        self.steps = np.zeros(len(self.offsets), np.int64) if steps is None else steps
        self.times = np.zeros(len(self.offsets), np.float64) if times is None else times
        self.fields = tuple(fields or ())


cdef class _Reader:
    """The bytes of an XTC/TRR for a scan: a C ``FILE`` for a path, or any binary file-like object's
    ``seek``/``read`` (an object in a remote byte store, a ``BytesIO``): one header read per frame."""

    cdef FILE *fh
    cdef object obj
    cdef readonly str name

    def __cinit__(self, src):
        self.fh = NULL
        self.obj = None
        if hasattr(src, "read") and hasattr(src, "seek"):
            self.obj = src
            self.name = str(getattr(src, "name", None) or getattr(src, "path", None) or type(src).__name__)
            return
        self.name = os.fsdecode(os.fspath(src))
        cdef bytes path = os.fsencode(src)
        self.fh = fopen(path, "rb")
        if self.fh == NULL:
            raise OSError(errno, strerror(errno).decode(), self.name)

    cdef long size(self) except -1:
        cdef long end
        if self.fh != NULL:
            with nogil:
                fseeko(self.fh, 0, SEEK_END)
                end = ftello(self.fh)
            return end
        self.obj.seek(0, 2)
        return int(self.obj.tell())

    cdef Py_ssize_t read_at(self, long pos, uint8_t *buf, Py_ssize_t n) except -1:
        """Up to ``n`` bytes at ``pos`` into ``buf``; how many were there."""
        cdef Py_ssize_t got
        cdef const uint8_t[::1] view
        if self.fh != NULL:
            with nogil:
                fseeko(self.fh, pos, SEEK_SET)
                got = <Py_ssize_t>fread(buf, 1, n, self.fh)
            return got
        self.obj.seek(pos)
        data = bytes(self.obj.read(n) or b"")[:n]
        got = len(data)
        if got:
            view = data
            memcpy(buf, &view[0], got)
        return got

    def close(self):
        if self.fh != NULL:
            fclose(self.fh)
            self.fh = NULL

    def __dealloc__(self):
        if self.fh != NULL:
            fclose(self.fh)
            self.fh = NULL


cdef inline int _be32(const uint8_t *p) noexcept nogil:
    return <int>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3])


cdef inline float _be_float(const uint8_t *p) noexcept nogil:
    cdef uint32_t bits = <uint32_t>_be32(p)
    cdef float f
    memcpy(&f, &bits, 4)
    return f


def scan_xtc(src, Py_ssize_t max_frames=-1, *, list partial_last=None):
    """``(n_atoms, offsets, fields, steps, times)`` of an XTC file (a path, or a binary file-like object
    with ``seek`` and ``read``: the same scan over any byte store), from its frames' headers: the byte
    offset, step and time of every frame (the first ``max_frames`` if not negative); fields is
    ``("position",)``, as :func:`scan_trr` gives a TRR's.

    Every header field the decoder uses is checked here, once per frame and in O(1): the
    atom count (the same in both of its places and in every frame), the precision
    (finite, positive), each axis's integer range (``minint <= maxint``, at most 31
    bits), ``smallidx`` (within the decoder's table) and the compressed byte count
    (not negative, within the decode buffer for the atom count, within the file).
    Each frame's size is positive, so the scan ends, and the offsets it keeps are at
    most the file's size over 56 bytes.

    Parameters
    ----------
    src
        The file: a path, or a binary file-like object (``seek``, ``tell``, ``read``).
    max_frames
        Scan the first ``max_frames`` frames only (all if negative).
    partial_last
        None: a last frame cut short (the file ends inside it, as it does when a
        simulation is killed mid-write) is an error. A list: that frame is left out of
        the offsets and ``(frame, byte offset, bytes present, bytes declared)`` is
        appended to the list. Damage before the last frame is an error either way; the
        error holds the whole frames before the damage (:class:`XDRFormatError`).

    Raises
    ------
    OSError
        The file cannot be opened.
    XDRFormatError
        A frame does not start with XTC's magic number, has a header field the decoder
        would not survive, another atom count than the first, or ends past the end of
        the file (cut short). The message names the frame, its byte offset and the field.
    """
    return _scan_xtc(src, max_frames, partial_last, False)[:5]


cdef tuple _scan_xtc(src, Py_ssize_t max_frames, list partial_last, bint growing):
    """:func:`scan_xtc`'s result and the byte where its frames end; ``growing``: :func:`scan_growing`'s."""
    cdef _Reader reader = _Reader(src)
    cdef uint8_t buf[HEADER]
    cdef long pos = 0, frame_bytes, file_size
    cdef long long nbytes, max_bytes
    cdef Py_ssize_t n = 0, got
    cdef int natoms, n_atoms = -1, magic, smallidx, d
    cdef int minint[3]
    cdef int maxint[3]
    cdef float precision
    cdef str problem = None
    cut = None
    offsets, steps, times = [], [], []
    try:
        file_size = reader.size()
        while pos < file_size and n != max_frames:
            got = reader.read_at(pos, buf, HEADER)
            if got < 16:
                cut = (n, pos, file_size - pos, 16)
                break
            magic, natoms = _be32(buf), _be32(buf + 4)
            if magic != MAGIC:
                problem = (f"no XTC frame at byte {pos} (frame {n}): magic number {magic}, not {MAGIC}"
                           if n else f"not an XTC file (magic number {magic}, not {MAGIC})")
                break
            if natoms < 0:
                problem = f"frame {n} at byte {pos}: natoms {natoms} is negative"
                break
            if n_atoms < 0:
                n_atoms = natoms
            elif natoms != n_atoms:
                problem = f"frame {n} at byte {pos} has {natoms} atoms, frame 0 has {n_atoms}"
                break
            if natoms < 10:
                frame_bytes = SHORT_HEADER + 12 * natoms
            elif got < HEADER:
                frame_bytes = HEADER   # its header alone is cut short
            else:
                frame_bytes = -1
            if got >= SHORT_HEADER and _be32(buf + 52) != natoms:
                problem = f"frame {n} at byte {pos}: the atom count before the coordinates is {_be32(buf + 52)}, not {natoms}"
                break
            if frame_bytes < 0:
                precision = _be_float(buf + 56)
                for d in range(3):
                    minint[d] = _be32(buf + 60 + 4 * d)
                    maxint[d] = _be32(buf + 72 + 4 * d)
                smallidx, nbytes = _be32(buf + 84), _be32(buf + 88)
                max_bytes = xdrfile_xtc_max_bytes(natoms)
                if not (precision > 0) or precision == np.inf:
                    problem = f"frame {n} at byte {pos}: precision {precision} is not finite and positive"
                elif xdrfile_xtc_check_ranges(minint, maxint) != 0:
                    problem = (f"frame {n} at byte {pos}: integer ranges minint {list(minint)} to maxint {list(maxint)} "
                               "are empty or wider than 31 bits")
                elif smallidx < FIRSTIDX or smallidx >= LASTIDX:
                    problem = f"frame {n} at byte {pos}: smallidx {smallidx} is outside {FIRSTIDX}..{LASTIDX - 1}"
                elif nbytes < 0 or nbytes > max_bytes:
                    problem = f"frame {n} at byte {pos}: byte count {nbytes} is outside 0..{max_bytes} for {natoms} atoms"
                elif natoms > 4 * nbytes + 8:   # at least 2 bits an atom
                    problem = f"frame {n} at byte {pos}: byte count {nbytes} cannot hold {natoms} atoms"
                if problem is not None:
                    break
                frame_bytes = HEADER + ((nbytes + 3) & ~3)
            if pos + frame_bytes > file_size:
                cut = (n, pos, file_size - pos, frame_bytes)
                break
            offsets.append(pos)
            steps.append(_be32(buf + 8))
            times.append(_be_float(buf + 12))   # the header's float32, as xtc_header reads it
            n += 1
            pos += frame_bytes
        if cut is not None:
            problem = _cut_short(reader, "XTC", MAGIC, cut, file_size, partial_last, _xtc_frame_start, n_atoms,
                                 growing)
    finally:
        reader.close()
    if problem is not None:
        raise XDRFormatError(problem, max(n_atoms, 0), np.array(offsets, np.int64), pos,
                             np.array(steps, np.int64), np.array(times, np.float64), ("position",))
    return max(n_atoms, 0), np.array(offsets, np.int64), ("position",), np.array(steps, np.int64), \
        np.array(times, np.float64), pos


def _xtc_frame_start(const uint8_t[::1] tail, Py_ssize_t i, int n_atoms) -> bool:
    return _be32(&tail[i]) == MAGIC and (n_atoms < 0 or _be32(&tail[i + 4]) == n_atoms)


def _trr_frame_start(const uint8_t[::1] tail, Py_ssize_t i, int n_atoms) -> bool:
    return _be32(&tail[i]) == TRR_MAGIC and _be32(&tail[i + 4]) == 13


cdef str _cut_short(_Reader reader, str fmt, int magic, tuple cut, long file_size, list partial_last, is_start,
                    int n_atoms, bint growing):
    """The error for a frame that ends past the end of the file, or None when it is the last frame,
    cut short, and the caller takes partial last frames (``partial_last``, a list, gets it).

    The frame is the last one when its bytes start with the format's magic number and no later
    frame starts in them: a simulation killed mid-write leaves only the start of one frame,
    while a damaged size field in the middle of a file leaves whole frames after it.

    ``growing``: the file is still being appended to, so the frame is the one being written;
    only the bytes of its header's first two words (the magic number, then the atom count of
    an XTC or the version string's length of a TRR) are checked, as far as they are present.
    Its other bytes are not searched for a frame start: coordinates can hold any bytes."""
    n, pos, present, declared = cut
    cdef long start = pos
    cdef Py_ssize_t i, size = min(present, 8) if growing else present
    tail = np.zeros(max(size, 8), np.uint8)
    cdef uint8_t[::1] view = tail
    size = reader.read_at(start, &view[0], size)
    if growing:
        if not _starts_frame(view, size, magic, n_atoms if magic == MAGIC else 13):
            return (f"frame {n} at byte {pos}: the {present} bytes after the last whole frame do not start "
                    f"an {fmt} frame" if n else f"not an {fmt} file (its first {present} bytes start no {fmt} frame)")
        if partial_last is not None:
            partial_last.append((n, pos, present, declared))
        return None
    if size < 4 or _be32(&view[0]) != magic:
        return (f"no {fmt} frame at byte {pos} (frame {n}): {size} bytes left, not a frame header" if n
                else f"not an {fmt} file (no {fmt} frame header in its {size} bytes)")
    where = f"frame {n} at byte {pos} is cut short (the file ends at byte {file_size}"
    if partial_last is None:
        return where + ")"
    for i in range(4, size - 7, 4):
        if is_start(view, i, n_atoms):
            return where + f"; another {fmt} frame starts at byte {pos + i}: damaged, not cut short)"
    partial_last.append((n, pos, present, declared))
    return None


cdef bint _starts_frame(const uint8_t[::1] head, Py_ssize_t size, int magic, int second):
    """Whether the ``size`` bytes of ``head`` (at most 8 read) agree with a frame that starts with the
    words ``magic`` and ``second`` (``second`` negative: any second word)."""
    cdef uint8_t want[8]
    cdef Py_ssize_t i
    for i in range(4):
        want[i] = (<uint32_t>magic >> (24 - 8 * i)) & 0xFF
        want[4 + i] = (<uint32_t>second >> (24 - 8 * i)) & 0xFF
    for i in range(min(size, 8)):
        if (i < 4 or second >= 0) and head[i] != want[i]:
            return False
    return True


def scan_growing(path, str fmt):
    """``(n_atoms, offsets, complete_bytes)`` of an XTC or TRR (``fmt``) that a writer is still appending to.

    The frames whose every byte is in the file now: the scan ends at the first frame
    the file ends inside, which is the frame being written, without an error and without
    a second scan. ``complete_bytes`` is where the last whole frame ends (the file's size
    when no frame is in progress). Every check of :func:`scan_xtc` and :func:`scan_trr`
    holds for the whole frames; of the frame in progress only the header bytes present
    are checked (its magic number and second word, and an XTC's header fields once they
    are all written), so a write caught at any byte is not taken for damage. ``n_atoms``
    is 0 and ``offsets`` empty while not even the first frame is whole.

    Raises
    ------
    OSError
        The file cannot be opened.
    XDRFormatError
        Damage: a frame, or the start of the frame in progress, that no writer of the
        format writes. The message names the frame, its byte offset and the field.
    """
    if fmt not in ("XTC", "TRR"):
        raise ValueError(f"{path}: scan_growing reads XTC or TRR, not {fmt!r}")
    found = (_scan_xtc if fmt == "XTC" else _scan_trr)(path, -1, None, True)
    return found[0], found[1], found[5]


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
        cdef int rc, natoms, st, size, got
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
                    # the units' factor applied as the decoder makes each float (the same product)
                    got = xdrfile_decompress_coord_float_scaled(dst, &size, n_want, &prec, factor, self._xd)
                    if got != self.n_atoms:
                        rc = got if got <= XTC_BAD_NATOMS else -3
                if rc == exdrOK and not every:
                    for j in range(n_sel):
                        for c in range(3):
                            out[i, j, c] = frame[pick[j], c]
            if rc == -2:
                raise XDRFormatError(f"frame {k} has {natoms} atoms, not {self.n_atoms} (changed since it was scanned?)")
            if rc in _XTC_PROBLEMS:
                raise XDRFormatError(f"frame {k} at byte {offsets[k]}: {_XTC_PROBLEMS[rc]}")
            if rc != exdrOK:
                raise XDRFormatError(f"cannot read frame {k} at byte {offsets[k]} (cut short or damaged?)")
            time[i] = t
            step[i] = st
            PyErr_CheckSignals()


#: The decoder's refusals (xdrfile.h's XTC_BAD_*), by the field that failed its check.
_XTC_PROBLEMS = {
    XTC_BAD_NATOMS: "the atom count before the coordinates is negative or not the header's",
    XTC_BAD_PRECISION: "precision is not finite and positive",
    XTC_BAD_RANGE: "integer ranges minint..maxint are empty or wider than 31 bits",
    XTC_BAD_SMALLIDX: "smallidx is outside the decoder's table",
    XTC_BAD_BYTECOUNT: "byte count is negative or larger than the decode buffer",
    XTC_BAD_BITS: "the compressed coordinates read past their byte count",
    XTC_BAD_RUN: "a run of atoms goes past the atom count",
    XTC_NOMEM: "no memory for the decode buffers",
}


#: Fields of a TRR frame, in read_trr's order; field i is flagged by bit 1 << i of its has_prop.
TRR_FIELDS = ("position", "velocity", "force")


def scan_trr(path, Py_ssize_t max_frames=-1, *, list partial_last=None):
    """``(n_atoms, offsets, fields, steps, times)`` of a TRR file (a path, or a binary file-like object
    whose headers are parsed here as xdrfile parses them): every frame's byte offset, step and
    time (the first ``max_frames`` if not negative) from its header and sizes, and the fields
    (``"position"``, ``"velocity"``, ``"force"``) its first frame holds.

    Every header is checked before its sizes are used (xdrfile's ``do_trnheader``):
    block sizes not negative, the box, virial and pressure blocks 9 reals, the x, v
    and f blocks 3 reals an atom, the blocks xdrfile does not read empty, and the
    atom count the same in every frame. ``partial_last`` is :func:`scan_xtc`'s.

    Raises
    ------
    OSError
        The file cannot be opened.
    XDRFormatError
        A frame header cannot be read (not a TRR, or damaged) or has a field that
        disagrees with the others, has another atom count than the first, or the frame
        ends past the end of the file (cut short). The message names the frame, its
        byte offset and the field.
    """
    if not isinstance(path, (str, bytes, os.PathLike)):   # a file-like object: the same checks over its bytes
        return _scan_trr_bytes(path, max_frames, partial_last)
    return _scan_trr(path, max_frames, partial_last, False)[:5]


cdef extern from "xdrfile_trr.h" nogil:
    const char *trr_header_problem(const t_trnheader *sh, int nflsz)


cdef enum:
    TRR_BUFSIZE = 128   # xdrfile_trr.c's BUFSIZE: the longest version string do_trnheader reads


cdef class _TRRHeader:
    """One TRR frame header parsed from bytes as xdrfile's ``do_trnheader`` reads it (the same fields,
    checks and failures), for :func:`scan_trr` over a file-like object."""

    cdef t_trnheader sh
    cdef readonly long size        # the header's bytes, when read whole
    cdef readonly bint eof         # a read ran past the end of the bytes
    cdef readonly bint ok
    cdef readonly long consumed    # bytes read before a failure (xdr_tell - pos)

    def __cinit__(self):
        self.size = 0
        self.eof = False
        self.ok = False
        self.consumed = 0

    @property
    def bad(self):
        return None if self.sh.bad == NULL else self.sh.bad.decode()


cdef bint _take(const uint8_t[::1] view, _TRRHeader h, long n):
    """Consume ``n`` bytes of the header; False (``eof`` set) where the bytes end first."""
    if h.consumed + n > view.shape[0]:
        h.eof = True
        h.consumed = view.shape[0]
        return False
    h.consumed += n
    return True


cdef _TRRHeader _parse_trr_header(const uint8_t[::1] view):
    """``do_trnheader`` over the bytes ``view`` (a frame's first bytes, up to its header's longest)."""
    cdef _TRRHeader h = _TRRHeader()
    cdef long at
    cdef unsigned int slen
    cdef int nflsz = 0, i
    cdef int ints[11]
    h.sh.bad = NULL
    if not _take(view, h, 4) or not _take(view, h, 4):   # magic (not compared, as xdrfile), version length
        return h
    if _be32(&view[4]) != 13:   # strlen("GMX_trn_file") + 1
        return h
    if not _take(view, h, 4):
        return h
    slen = <unsigned int>_be32(&view[8])
    if slen > TRR_BUFSIZE or not _take(view, h, (slen + 3) & ~3):
        return h
    at = h.consumed
    for i in range(11):
        if not _take(view, h, 4):
            return h
        ints[i] = _be32(&view[at + 4 * i])
    h.sh.ir_size, h.sh.e_size, h.sh.box_size, h.sh.vir_size, h.sh.pres_size = ints[0], ints[1], ints[2], ints[3], ints[4]
    h.sh.top_size, h.sh.sym_size, h.sh.x_size, h.sh.v_size, h.sh.f_size = ints[5], ints[6], ints[7], ints[8], ints[9]
    h.sh.natoms = ints[10]
    # nFloatSize
    if (h.sh.natoms <= 0 or h.sh.natoms > 2147483647 // 24) and h.sh.box_size == 0:
        h.sh.bad = b"natoms" if (h.sh.natoms < 0 or h.sh.natoms > 2147483647 // 24) else \
            b"box_size, x_size, v_size or f_size (neither float nor double reals)"
        return h
    if h.sh.box_size:
        nflsz = h.sh.box_size // 9
    elif h.sh.x_size:
        nflsz = h.sh.x_size // (h.sh.natoms * 3)
    elif h.sh.v_size:
        nflsz = h.sh.v_size // (h.sh.natoms * 3)
    elif h.sh.f_size:
        nflsz = h.sh.f_size // (h.sh.natoms * 3)
    if nflsz != 4 and nflsz != 8:
        h.sh.bad = b"natoms" if (h.sh.natoms < 0 or h.sh.natoms > 2147483647 // 24) else \
            b"box_size, x_size, v_size or f_size (neither float nor double reals)"
        return h
    h.sh.bad = trr_header_problem(&h.sh, nflsz)
    if h.sh.bad != NULL:
        return h
    at = h.consumed
    if not _take(view, h, 8 + 2 * nflsz):   # step, nre, then time and lambda as float or double
        return h
    h.sh.step = _be32(&view[at])
    h.sh.td = _be_double(&view[at + 8]) if nflsz == 8 else _be_float(&view[at + 8])
    h.size = h.consumed
    h.ok = True
    return h


cdef inline double _be_double(const uint8_t *p) noexcept nogil:
    cdef uint64_t bits = (<uint64_t><uint32_t>_be32(p) << 32) | <uint32_t>_be32(p + 4)
    cdef double d
    memcpy(&d, &bits, 8)
    return d


cdef tuple _scan_trr_bytes(src, Py_ssize_t max_frames, list partial_last):
    """:func:`scan_trr` over a binary file-like object: each header parsed as ``do_trnheader`` parses it."""
    cdef _Reader reader = _Reader(src)
    cdef long pos = 0, file_size, frame_bytes
    cdef int n_atoms = -1, has = 0
    cdef Py_ssize_t n = 0, got
    cdef str problem = None
    cdef _TRRHeader h
    head = np.zeros(24 + TRR_BUFSIZE + 4 + 44 + 8 + 16, np.uint8)
    cdef uint8_t[::1] view = head
    cut = None
    found, steps, times = [], [], []
    try:
        file_size = reader.size()
        while pos < file_size and n != max_frames:
            got = reader.read_at(pos, &view[0], view.shape[0])
            h = _parse_trr_header(view[:got])
            if not h.ok:
                if h.bad is not None:
                    problem = f"frame {n} at byte {pos}: header field {h.bad} disagrees with the others"
                elif h.eof or pos + h.consumed >= file_size:
                    cut = (n, pos, file_size - pos, h.consumed)
                else:
                    problem = (f"frame {n} at byte {pos}: no TRR frame header (cut short or damaged?)" if n
                               else "not a TRR file (no TRR frame header at its start)")
                break
            if n_atoms < 0:
                n_atoms = h.sh.natoms
                has = (h.sh.x_size > 0) | (h.sh.v_size > 0) << 1 | (h.sh.f_size > 0) << 2
            elif h.sh.natoms != n_atoms:
                problem = f"frame {n} at byte {pos} has {h.sh.natoms} atoms, frame 0 has {n_atoms}"
                break
            frame_bytes = h.size + <long>h.sh.ir_size + h.sh.e_size + h.sh.box_size + h.sh.vir_size + \
                h.sh.pres_size + h.sh.top_size + h.sh.sym_size + h.sh.x_size + h.sh.v_size + h.sh.f_size
            if pos + frame_bytes > file_size:
                cut = (n, pos, file_size - pos, frame_bytes)
                break
            found.append(pos)
            steps.append(h.sh.step)
            times.append(<float> h.sh.td)
            n += 1
            pos += frame_bytes
        if cut is not None:
            problem = _cut_short(reader, "TRR", TRR_MAGIC, cut, file_size, partial_last, _trr_frame_start, n_atoms,
                                 False)
    finally:
        reader.close()
    fields = tuple(f for i, f in enumerate(TRR_FIELDS) if has & (1 << i))
    if problem is not None:
        raise XDRFormatError(problem, max(n_atoms, 0), np.array(found, np.int64), pos,
                             np.array(steps, np.int64), np.array(times, np.float64), fields)
    return max(n_atoms, 0), np.array(found, np.int64), fields, np.array(steps, np.int64), np.array(times, np.float64)


cdef tuple _scan_trr(path, Py_ssize_t max_frames, list partial_last, bint growing):
    """:func:`scan_trr`'s result and the byte where its frames end; ``growing``: :func:`scan_growing`'s."""
    cdef bytes name = os.fsencode(path)
    cdef XDRFILE *xd = xdrfile_open(name, "r")
    if xd == NULL:
        raise OSError(errno, strerror(errno).decode(), str(path))
    cdef t_trnheader sh
    cdef int64_t pos = 0, file_size, frame_bytes
    cdef int rc, n_atoms = -1, has = 0
    cdef Py_ssize_t n = 0
    cdef str problem = None
    cdef _Reader reader = None
    cut = None
    found, steps, times = [], [], []
    try:
        with nogil:
            xdr_seek(xd, 0, SEEK_END)
            file_size = xdr_tell(xd)
        while pos < file_size and n != max_frames:
            with nogil:
                xdr_seek(xd, pos, SEEK_SET)
                sh.bad = NULL
                rc = do_trnheader(xd, 1, &sh)
            if rc != exdrOK:
                if sh.bad != NULL:
                    problem = f"frame {n} at byte {pos}: header field {sh.bad.decode()} disagrees with the others"
                elif xdr_tell(xd) >= file_size:
                    cut = (n, pos, file_size - pos, xdr_tell(xd) - pos)
                else:
                    problem = (f"frame {n} at byte {pos}: no TRR frame header (cut short or damaged?)" if n
                               else "not a TRR file (no TRR frame header at its start)")
                break
            if n_atoms < 0:
                n_atoms = sh.natoms
                has = (sh.x_size > 0) | (sh.v_size > 0) << 1 | (sh.f_size > 0) << 2
            elif sh.natoms != n_atoms:
                problem = f"frame {n} at byte {pos} has {sh.natoms} atoms, frame 0 has {n_atoms}"
                break
            frame_bytes = (xdr_tell(xd) - pos) + <int64_t>sh.ir_size + sh.e_size + sh.box_size + sh.vir_size + \
                sh.pres_size + sh.top_size + sh.sym_size + sh.x_size + sh.v_size + sh.f_size
            if pos + frame_bytes > file_size:
                cut = (n, pos, file_size - pos, frame_bytes)
                break
            found.append(pos)
            steps.append(sh.step)
            times.append(<float> sh.td)   # as read_trr gives it (float)
            n += 1
            pos += frame_bytes
        if cut is not None:
            reader = _Reader(path)
            problem = _cut_short(reader, "TRR", TRR_MAGIC, cut, file_size, partial_last, _trr_frame_start, n_atoms,
                                 growing)
    finally:
        xdrfile_close(xd)
        if reader is not None:
            reader.close()
    fields = tuple(f for i, f in enumerate(TRR_FIELDS) if has & (1 << i))
    if problem is not None:
        raise XDRFormatError(problem, max(n_atoms, 0), np.array(found, np.int64), pos,
                             np.array(steps, np.int64), np.array(times, np.float64), fields)
    return max(n_atoms, 0), np.array(found, np.int64), fields, np.array(steps, np.int64), \
        np.array(times, np.float64), pos


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
                sh.bad = NULL
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
            if rc != exdrOK and sh.bad != NULL:
                raise XDRFormatError(f"frame {k} at byte {offsets[k]}: header field {sh.bad.decode()} "
                                     "disagrees with the others")
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

