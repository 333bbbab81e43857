"""One trajectory file in a format MDAnalysis reads, opened without a Universe: a part of a chain.

XTC and TRR frames are found by byte offsets that the process preparing a job
scans once (:func:`scan_part`) and ships in the source's config: a worker seeks
straight to its frames and never rebuilds the offsets, nor reads or writes
MDAnalysis's ``.NAME_offsets.npz`` cache (several ranks writing it at once
raced, seed 001). XTC frames are decoded by :mod:`._xtc`, the xdrfile C library
that MDAnalysis's readers use, compiled into trajscale: the same bits, without
importing MDAnalysis; only the selected atoms are copied into the block. TRR
frames are decoded by MDAnalysis's ``libmdaxdr``. Other formats (DCD, NetCDF,
...) go through MDAnalysis's reader class for the file alone: no topology is
parsed per part.
"""

from __future__ import annotations

import logging
import struct
import warnings

import numpy as np

from ..block import Block
from ..errors import InputFileError
from ..store.box import edges_to_dimensions
from .base import Source

log = logging.getLogger(__name__)

#: Formats read through libmdaxdr with shipped frame offsets.
XDR_FORMATS = ("XTC", "TRR")
#: GROMACS units to MDAnalysis's (nm -> Å; kJ/(mol nm) -> kJ/(mol Å)), per field.
XDR_SCALE = {"position": np.float32(10.0), "velocity": np.float32(10.0), "force": np.float32(0.1)}
#: Seconds per atom to decode one frame (XTC's compressed coordinates: 4.1 ms for 47,681 atoms on the
#: 2-core VM); other formats are plain floats, costed by their bytes.
DECODE_S_PER_ATOM = {"XTC": 8.5e-8}
#: The units XTC stores (MDAnalysis's ``XTCReader.units``), known without importing MDAnalysis.
XTC_UNITS = {"time": "ps", "length": "nm"}
_FRAME_ATTRS = {"position": "x", "velocity": "v", "force": "f"}


def encode_offsets(offsets) -> str:
    """Frame offsets as one JSON-plain string (base64 of little-endian int64): 8 bytes a frame in a
    config, where a list of Python ints costs ~36, and cheap to pickle for every task."""
    import base64

    return base64.b64encode(np.asarray(offsets, dtype="<i8").tobytes()).decode("ascii")


def decode_offsets(text: str) -> np.ndarray:
    import base64

    return np.frombuffer(base64.b64decode(text), dtype="<i8").astype(np.int64)


def part_format(path: str) -> str:
    """MDAnalysis's name for the file's format (from its extension), upper case."""
    ext = path.rpartition(".")[2].upper()
    if ext in XDR_FORMATS:   # GROMACS's own: known without importing MDAnalysis
        return ext
    from MDAnalysis.lib.util import guess_format

    try:
        return str(guess_format(path)).upper()
    except (ValueError, TypeError) as exc:
        raise InputFileError(path, f"MDAnalysis does not know its format ({exc})") from None


def _xdr_file(path: str, fmt: str, n_atoms: int | None = None):
    """An open XTC (trajscale's xdrfile, ``n_atoms`` known) or TRR (MDAnalysis's libmdaxdr) file."""
    try:
        if fmt == "XTC":
            from ._xtc import XTCFile

            return XTCFile(path, n_atoms)
        from MDAnalysis.lib.formats.libmdaxdr import TRRFile

        return TRRFile(path)
    except (OSError, RuntimeError, ValueError) as exc:
        raise InputFileError(path, f"cannot be read as {fmt}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _scan_xtc(path: str) -> tuple[int, np.ndarray]:
    """``(n_atoms, offsets)`` from the frames' headers (no coordinates decoded)."""
    from ._xtc import XTCFormatError, scan

    try:
        return scan(path)
    except (OSError, XTCFormatError) as exc:
        raise InputFileError(path, f"cannot be read as XTC: {_one_line(exc)}") from None


def _xtc_atoms(path: str) -> int:
    """The atom count in an XTC's first frame header (magic, natoms, ...)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise InputFileError(path, f"cannot be read as XTC: {_one_line(exc)}") from None
    if len(head) < 8 or struct.unpack(">i", head[:4])[0] != 1995:
        raise InputFileError(path, "cannot be read as XTC: not an XTC file")
    return struct.unpack(">i", head[4:])[0]


def scan_part(path: str) -> dict:
    """``{"path", "format", "n_frames", "n_atoms", "offsets"}`` of one part (offsets: XTC/TRR only).

    The scan reads the frame headers of an XTC/TRR (not its coordinates); other
    formats are opened with MDAnalysis's reader for their frame count.
    """
    fmt = part_format(path)
    if fmt == "XTC":
        n_atoms, offsets = _scan_xtc(path)
        log.debug("%s: frame offsets scanned (%d frames)", path, len(offsets))
        return {"path": path, "format": fmt, "n_frames": len(offsets), "n_atoms": n_atoms,
                "offsets": encode_offsets(offsets)}
    if fmt in XDR_FORMATS:
        f = _xdr_file(path, fmt)
        try:
            offsets = encode_offsets(f.offsets)
            n_frames, n_atoms = len(f.offsets), int(f.n_atoms)
        except (OSError, RuntimeError, ValueError) as exc:
            raise InputFileError(path, f"cannot be read as {fmt}: {' '.join(str(exc).split())}") from None
        finally:
            f.close()
        log.debug("%s: frame offsets scanned (%d frames)", path, n_frames)
        return {"path": path, "format": fmt, "n_frames": n_frames, "n_atoms": n_atoms, "offsets": offsets}
    with PartSource(path, format=fmt) as src:
        return {"path": path, "format": fmt, "n_frames": src.n_frames, "n_atoms": src.n_atoms, "offsets": None}


class PartSource(Source):
    """Frames of one trajectory file (XTC, TRR, DCD, NetCDF, ...), read without a topology.

    Parameters
    ----------
    path
        The trajectory file.
    n_atoms
        Atoms per frame, if known (checked against the file; formats without an
        atom count in the file need it).
    offsets
        Byte offset of every frame (XTC/TRR), as :func:`scan_part` found them
        (:func:`encode_offsets`' string or an array); None scans the file here.
    format
        MDAnalysis's format name (default: from the extension).
    """

    kind = "part"

    def __init__(self, path: str, n_atoms: int | None = None, offsets: str | np.ndarray | None = None,
                 format: str | None = None) -> None:
        self._path = str(path)
        self.format = (format or part_format(self._path)).upper()
        self._file = self._reader = None
        self.bytes_read = 0
        self._xdr = self.format in XDR_FORMATS
        if self.format == "XTC":
            if offsets is None:   # scanned here: only when no offsets were shipped
                n_found, offsets = _scan_xtc(self._path)
                log.debug("%s: frame offsets scanned (%d frames)", self._path, len(offsets))
            else:
                n_found = _xtc_atoms(self._path) if n_atoms is None else int(n_atoms)
            self._offsets = decode_offsets(offsets) if isinstance(offsets, str) else np.asarray(offsets, np.int64)
            self._file = _xdr_file(self._path, self.format, n_found)
            self._n_atoms, self._n_frames, self._fields = n_found, len(self._offsets), ("position",)
        elif self._xdr:
            self._file = _xdr_file(self._path, self.format)
            if offsets is None:   # scanned here: only when no offsets were shipped
                try:
                    offsets = self._file.offsets
                except (OSError, RuntimeError, ValueError) as exc:
                    self.close()
                    raise InputFileError(self._path, f"cannot be read as {self.format}: "
                                                     f"{' '.join(str(exc).split())}") from None
                log.debug("%s: frame offsets scanned (%d frames)", self._path, len(offsets))
            self._offsets = decode_offsets(offsets) if isinstance(offsets, str) else np.asarray(offsets, np.int64)
            self._file.set_offsets(self._offsets)
            self._n_atoms = int(self._file.n_atoms)
            self._fields = self._trr_fields()
            self._n_frames = len(self._offsets)
        else:
            self._reader = self._open_reader(n_atoms)
            self._n_atoms = int(self._reader.n_atoms)
            ts = self._reader.ts
            self._fields = tuple(fl for fl, has in (("position", True), ("velocity", ts.has_velocities),
                                                    ("force", ts.has_forces)) if has)
            self._n_frames = int(self._reader.n_frames)
        if n_atoms is not None and int(n_atoms) != self._n_atoms:
            self.close()
            raise InputFileError(self._path, f"has {self._n_atoms} atoms per frame, expected {n_atoms}")

    def _open_reader(self, n_atoms):
        from MDAnalysis.core._get_readers import get_reader_for

        kw = {} if n_atoms is None else {"n_atoms": int(n_atoms)}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return get_reader_for(self._path, format=self.format)(self._path, **kw)
        except Exception as exc:   # noqa: BLE001 - any reader failure is this file's
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise InputFileError(self._path, f"MDAnalysis cannot read it: {detail}") from None

    def _trr_fields(self) -> tuple[str, ...]:
        if not len(self._offsets):
            return ("position",)
        n = int(self._file.n_atoms)
        bufs = [np.empty((n, 3), np.float32) for _ in range(3)]
        self._file.seek(0)
        fr = self._file.read_direct_xvf(*bufs)
        return tuple(fl for fl, has in (("position", fr.hasx), ("velocity", fr.hasv), ("force", fr.hasf)) if has)

    @property
    def path(self) -> str:
        return self._path

    @property
    def n_frames(self) -> int:
        return self._n_frames

    @property
    def n_atoms(self) -> int:
        return self._n_atoms

    @property
    def fields(self) -> tuple[str, ...]:
        return self._fields

    @property
    def native_units(self) -> dict[str, str]:
        """The units the file stores, as MDAnalysis's reader for its format declares them
        (``{"length": "nm", "time": "ps", ...}``); blocks are always in MDAnalysis's units."""
        if self._reader is not None:
            return dict(getattr(self._reader, "units", None) or {})
        if self.format == "XTC":
            return dict(XTC_UNITS)
        from MDAnalysis.core._get_readers import get_reader_for

        return dict(getattr(get_reader_for(self._path, format=self.format), "units", None) or {})

    def get_config(self) -> dict:
        offsets = encode_offsets(self._offsets) if self._xdr else None
        return {"kind": self.kind, "path": self._path, "n_atoms": self._n_atoms, "offsets": offsets,
                "format": self.format}

    def layout_summary(self) -> dict:
        return {"format": self.format, "path": self._path, "n_atoms": self._n_atoms}

    def decode_seconds_per_frame(self) -> float:
        return DECODE_S_PER_ATOM.get(self.format, 0.0) * self._n_atoms

    def step_time(self, frame: int) -> tuple[int, float]:
        """An XTC frame's step and time from its header (XDR: magic, natoms, step, time), no coordinates
        decoded: joining 10,000 parts reads a few per part."""
        if self.format != "XTC":
            return super().step_time(frame)
        self.check_range(frame, frame + 1)
        with open(self._path, "rb") as fh:
            fh.seek(int(self._offsets[frame]))
            head = fh.read(16)
        if len(head) < 16:
            raise InputFileError(self._path, f"cannot read frame {frame} (truncated?)")
        _, _, step, time = struct.unpack(">iiif", head)
        return int(step), float(np.float32(time))

    def read(self, start: int, stop: int, atoms: np.ndarray | None = None,
             fields: tuple[str, ...] = ("position",), stride: int = 1) -> Block:
        self.check_range(start, stop)
        self.check_request(atoms, fields)
        n = len(range(start, stop, stride))
        n_sel = self._n_atoms if atoms is None else len(atoms)
        out = {fl: self._out_array(fl, (n, n_sel, 3)) for fl in fields}
        box, time, step = np.zeros((n, 6), np.float32), np.empty(n), np.empty(n, np.int64)
        self.read_into(start, stop, atoms, stride, out, box, time, step)
        return Block(start, stop, out["position"], box, time, step,
                     velocities=out.get("velocity"), forces=out.get("force"), stride=stride)

    def read_into(self, start: int, stop: int, atoms: np.ndarray | None, stride: int,
                  out: dict[str, np.ndarray], box: np.ndarray, time: np.ndarray, step: np.ndarray) -> None:
        """Frames ``start:stop:stride`` into the given rows (``out[field]``, box, time, step: one row per frame)."""
        sel = None if atoms is None else np.asarray(atoms, dtype=np.intp)
        if self.format == "XTC":
            self._read_xtc(start, stop, stride, sel, out, box, time, step)
        elif self._xdr:
            self._read_trr(start, stop, stride, sel, out, box, time, step)
        else:
            from .mda import copy_frames

            copy_frames(self._reader, start, stop, stride, sel, out, box, time, step)
        self.bytes_read += sum(a.nbytes for a in out.values())

    def _read_xtc(self, start, stop, stride, sel, out, box, time, step) -> None:
        """Frames decoded by the compiled xdrfile, the GIL released; nm -> Å on the selected atoms only."""
        from ._xtc import XTCFormatError

        frames = np.arange(start, stop, stride, dtype=np.int64)
        if not len(frames):
            return
        edges = np.empty((len(frames), 3, 3), np.float32)
        try:
            self._file.read(self._offsets, frames, sel, out["position"], edges, time, step,
                            XDR_SCALE["position"])
        except (OSError, XTCFormatError) as exc:
            raise InputFileError(self._path, _one_line(exc)) from None
        box[:] = _xdr_box(edges)

    def _read_trr(self, start, stop, stride, sel, out, box, time, step) -> None:
        frames = range(start, stop, stride)
        if not len(frames):
            return
        # Whole frames are decoded into one reused buffer per field; only the selected atoms are copied out.
        scratch = {fl: self._scratch_frame(fl) for fl in ("position", "velocity", "force")}
        edges = np.empty((len(frames), 3, 3), np.float32)
        f, k = self._file, start
        try:
            f.seek(start)
            for i, k in enumerate(frames):
                if stride > 1 and i:
                    f.seek(k)   # skipped frames are not decoded
                fr = f.read_direct_xvf(scratch["position"], scratch["velocity"], scratch["force"])
                for fl in out:
                    if not getattr(fr, f"has{_FRAME_ATTRS[fl]}"):
                        raise InputFileError(self._path, f"frame {k} has no {fl} data")
                for fl, arr in out.items():
                    if sel is None:
                        arr[i] = scratch[fl]
                    else:
                        np.take(scratch[fl], sel, axis=0, out=arr[i])
                edges[i], time[i], step[i] = fr.box, fr.time, fr.step
        except (OSError, EOFError, StopIteration) as exc:
            raise InputFileError(self._path, f"cannot read frame {k} (truncated or damaged?): "
                                             f"{_one_line(exc)}") from None
        for fl, arr in out.items():   # units of the selected atoms only, once per block
            arr *= XDR_SCALE[fl]
        box[:] = _xdr_box(edges)

    def _scratch_frame(self, field: str) -> np.ndarray:
        buf = getattr(self, "_frame_buf", None)
        if buf is None:
            buf = self._frame_buf = {}
        if field not in buf:
            buf[field] = np.empty((self._n_atoms, 3), np.float32)
        return buf[field]

    def close(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            try:
                handle.close()
            except OSError:
                pass
        reader, self._reader = self._reader, None
        if reader is not None:
            try:
                reader.close()
            except Exception as exc:   # noqa: BLE001 - closing is best effort
                log.debug("closing %s: %s", self._path, exc)


def _xdr_box(edges: np.ndarray) -> np.ndarray:
    """Box dimensions (Å, degrees) from the stored nm vectors: angles first, then lengths to Å, in
    MDAnalysis's order (triclinic_box, then convert_pos_from_native), so the box equals its to the last bit."""
    dims = edges_to_dimensions(edges)
    dims[:, :3] *= np.float32(10.0)
    return dims
