"""One trajectory file in a format MDAnalysis reads, opened without a Universe: a part of a chain.

XTC and TRR frames are found by byte offsets that the process preparing a job
scans once (:func:`scan_part`) and ships in the source's config: a worker seeks
straight to its frames and never rebuilds the offsets, nor reads or writes
MDAnalysis's ``.NAME_offsets.npz`` cache (several ranks writing it at once
raced, Khoshlessan et al. 2020). XTC and TRR frames are read by :mod:`._xdr`, the xdrfile C
library that MDAnalysis's readers use, compiled into trajscale: the same bits,
without importing MDAnalysis; only the selected atoms are copied into the block.
Other formats (DCD, NetCDF, ...) go through MDAnalysis's reader class for the
file alone: no topology is parsed per part.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import struct
import warnings

import numpy as np

from ..block import Block
from ..errors import InputFileError
from ..facts import LayoutFacts
from ..store.box import edges_to_dimensions
from .base import DECODE_S_PER_ATOM, Source

log = logging.getLogger(__name__)

#: Formats read by the compiled xdrfile (:mod:`._xdr`) at shipped frame offsets.
XDR_FORMATS = ("XTC", "TRR")
#: GROMACS units to MDAnalysis's (nm -> Å; kJ/(mol nm) -> kJ/(mol Å)), per field.
XDR_SCALE = {"position": np.float32(10.0), "velocity": np.float32(10.0), "force": np.float32(0.1)}
#: The units XTC and TRR store (MDAnalysis's ``XTCReader.units``, ``TRRReader.units``), known without
#: importing MDAnalysis.
XDR_UNITS = {"XTC": {"time": "ps", "length": "nm"},
             "TRR": {"time": "ps", "length": "nm", "velocity": "nm/ps", "force": "kJ/(mol*nm)"}}


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


def _xdr_file(path: str, fmt: str, n_atoms: int):
    """An XTC or TRR file open for reading frames at known offsets (xdrfile, compiled into trajscale)."""
    from ._xdr import TRRFile, XTCFile

    try:
        return (XTCFile if fmt == "XTC" else TRRFile)(path, n_atoms)
    except OSError as exc:
        raise InputFileError(path, f"cannot be read as {fmt}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


#: Whether a cut-short last XTC/TRR frame is refused when the caller does not say (``strict=None``):
#: the CLI's ``--strict`` sets it for the command it runs (:func:`refuse_partial_frames`).
_STRICT = contextvars.ContextVar("trajscale_strict_parts", default=False)


@contextlib.contextmanager
def refuse_partial_frames(strict: bool = True):
    """Within the block, a part whose last frame is cut short is refused (``strict=True``) or read
    without that frame, with a warning (``False``), wherever a part is opened without ``strict=``."""
    token = _STRICT.set(bool(strict))
    try:
        yield
    finally:
        _STRICT.reset(token)


def _scan_xdr(path: str, fmt: str, first_only: bool = False, strict: bool | None = None) -> tuple:
    """``(n_atoms, offsets, fields, steps, times)`` of an XTC/TRR from its frames' headers (no
    coordinates read); ``first_only``: the first frame's, for a worker that was shipped the offsets.

    A last frame cut short (a simulation killed while writing it) is left out with one
    warning naming the file, the frame and its bytes, unless ``strict`` (default: the
    process's, see :func:`refuse_partial_frames`) refuses the file instead."""
    from ._xdr import XDRFormatError, scan_trr, scan_xtc

    strict = _STRICT.get() if strict is None else strict
    dropped: list | None = None if strict and not first_only else []
    try:
        found = (scan_xtc if fmt == "XTC" else scan_trr)(path, 1 if first_only else -1, partial_last=dropped)
    except (OSError, XDRFormatError) as exc:
        hint = "" if "cut short" not in str(exc) or not strict else " (without --strict its complete frames are read)"
        raise InputFileError(path, f"cannot be read as {fmt}: {_one_line(exc)}{hint}") from None
    if dropped and not first_only:
        frame, offset, present, declared = dropped[0]
        log.warning("%s: its last frame (frame %d at byte %d) is cut short: %d of its %d bytes are in the "
                    "file; the %d complete frames are read (--strict refuses such a file)",
                    path, frame, offset, present, declared, frame)
    return found


def scan_part(path: str, strict: bool | None = None) -> dict:
    """``{"path", "format", "n_frames", "n_atoms", "offsets"}`` of one part (offsets: XTC/TRR only).

    The scan reads the frame headers of an XTC/TRR (not its coordinates); other
    formats are opened with MDAnalysis's reader for their frame count. A cut-short
    last XTC/TRR frame is left out with a warning, or refused with ``strict``
    (default: :func:`refuse_partial_frames`'s setting).
    """
    fmt = part_format(path)
    if fmt in XDR_FORMATS:
        n_atoms, offsets, *_ = _scan_xdr(path, fmt, strict=strict)
        log.debug("%s: frame offsets scanned (%d frames)", path, len(offsets))
        return {"path": path, "format": fmt, "n_frames": len(offsets), "n_atoms": n_atoms,
                "offsets": encode_offsets(offsets)}
    with PartSource(path, format=fmt) as src:
        return {"path": path, "format": fmt, "n_frames": src.n_frames, "n_atoms": src.n_atoms, "offsets": None}


def describe_part(path: str, strict: bool | None = None) -> dict:
    """What ``trajscale inspect`` prints for an XTC or TRR: format, size, frames, atoms, fields, the
    file's units and its times and steps, all from the frames' headers (no coordinates read)."""
    import os

    from ..store.inspect import times_summary

    fmt = part_format(path)
    if fmt not in XDR_FORMATS:
        raise InputFileError(path, f"inspect reads H5MD, XTC and TRR files, not {fmt}: convert it to H5MD "
                                   "(trajscale convert TOPOLOGY FILE -o FILE.h5md)")
    n_atoms, offsets, fields, steps, times = _scan_xdr(path, fmt, strict=strict)
    return {"format": fmt.lower(), "path": path, "file_bytes": os.path.getsize(path), "n_frames": len(offsets),
            "n_atoms": n_atoms, "fields": list(fields), "units": dict(XDR_UNITS[fmt]),
            "time": times_summary(times, steps)}


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
    strict
        A last XTC/TRR frame cut short: refused (True) or left out with a warning
        (False); None: :func:`refuse_partial_frames`'s setting.
    """

    kind = "part"

    def __init__(self, path: str, n_atoms: int | None = None, offsets: str | np.ndarray | None = None,
                 format: str | None = None, strict: bool | None = None) -> None:
        self._path = str(path)
        self.format = (format or part_format(self._path)).upper()
        self._file = self._reader = None
        self.bytes_read = 0
        self._xdr = self.format in XDR_FORMATS
        if self._xdr:
            if offsets is None:   # scanned here: only when no offsets were shipped
                n_found, offsets, self._fields, *_ = _scan_xdr(self._path, self.format, strict=strict)
                log.debug("%s: frame offsets scanned (%d frames)", self._path, len(offsets))
            elif self.format == "XTC" and n_atoms is not None:   # shipped: nothing to read before the frames
                n_found, self._fields = int(n_atoms), ("position",)
            else:   # a TRR's fields, from its first frame's header
                n_found, _, self._fields, *_ = _scan_xdr(self._path, self.format, first_only=True)
            self._offsets = decode_offsets(offsets) if isinstance(offsets, str) else np.asarray(offsets, np.int64)
            # Only a complete frame vouches for its header's atom count (the scan bounds it by the frame's
            # bytes): with none, e.g. one frame cut short, no decode buffer of that count is made.
            self._file = _xdr_file(self._path, self.format, n_found if len(self._offsets) else 0)
            self._n_atoms, self._n_frames = n_found, len(self._offsets)
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
            raise InputFileError(self._path, f"MDAnalysis cannot read it: {_one_line(exc)}") from None

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
        if self._xdr:
            return dict(XDR_UNITS[self.format])
        from MDAnalysis.core._get_readers import get_reader_for

        return dict(getattr(get_reader_for(self._path, format=self.format), "units", None) or {})

    def get_config(self) -> dict:
        offsets = encode_offsets(self._offsets) if self._xdr else None
        return {"kind": self.kind, "path": self._path, "n_atoms": self._n_atoms, "offsets": offsets,
                "format": self.format}

    def layout_summary(self) -> LayoutFacts:
        return LayoutFacts(format=self.format, path=self._path, n_atoms=self._n_atoms)

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
        if self._xdr:
            self._read_xdr(start, stop, stride, sel, out, box, time, step)
        else:
            from .mda import copy_frames

            copy_frames(self._reader, start, stop, stride, sel, out, box, time, step)
        self.bytes_read += sum(a.nbytes for a in out.values())

    def _read_xdr(self, start, stop, stride, sel, out, box, time, step) -> None:
        """Frames read by the compiled xdrfile, the GIL released; units (nm -> Å, ...) applied to the
        selected atoms only, as they are copied out of the frame."""
        from ._xdr import XDRFormatError

        frames = np.arange(start, stop, stride, dtype=np.int64)
        if not len(frames):
            return
        edges = np.empty((len(frames), 3, 3), np.float32)
        try:
            self._file.read(self._offsets, frames, sel, out, edges, time, step, XDR_SCALE)
        except (OSError, XDRFormatError) as exc:
            raise InputFileError(self._path, _one_line(exc)) from None
        box[:] = _xdr_box(edges)

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
