"""One XTC or TRR file, opened without a Universe: a trajectory, or a part of a chain.

XTC and TRR frames are found by byte offsets that the process preparing a job
scans once (:func:`scan_part`) and ships in the source's config: a worker seeks
straight to its frames and never rebuilds the offsets, nor reads or writes
MDAnalysis's ``.NAME_offsets.npz`` cache (several ranks writing it at once
raced, Khoshlessan et al. 2020). XTC and TRR frames are read by :mod:`._xdr`, the xdrfile C
library that MDAnalysis's readers use, compiled into trajscale: the same bits,
without importing MDAnalysis; only the selected atoms are copied into the block.
Other formats MDAnalysis reads (DCD, NetCDF, ...) are read one file at a time by
:class:`~trajscale.sources.mdapart.MDAPartSource`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import struct
from pathlib import Path
from types import MappingProxyType

import numpy as np

from ..block import Block
from ..box import edges_to_dimensions
from ..errors import InputFileError
from ..sources.base import OneFileSource, OpenRequest, file_head
from ..util import is_url

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


def _scan_xdr(path, fmt: str, first_only: bool = False, strict: bool | None = None,
              damaged: list | None = None) -> tuple:
    """``(n_atoms, offsets, fields, steps, times)`` of an XTC/TRR from its frames' headers (no
    coordinates read); ``first_only``: the first frame's, for a worker that was shipped the offsets.

    ``path`` is a path or a binary file-like object (``seek``/``tell``/``read``: an object in a
    remote byte store), so one scan builds the offsets index wherever the bytes are.

    A last frame cut short (a simulation killed while writing it) is left out with one warning
    naming the file, the frame and its bytes; damage after some whole frames (bytes that start
    no frame where one should start, a header no writer writes) ends the trajectory at the last
    whole frame before it, with one warning naming the frame and the byte (and that damage
    appended to ``damaged``). ``strict`` (default: the process's, see :func:`refuse_partial_frames`)
    refuses the file instead, in both cases."""
    from ._xdr import XDRFormatError, scan_trr, scan_xtc

    strict = _STRICT.get() if strict is None else strict
    dropped: list = []   # the scan tells a cut-short last frame from damage; strict refuses either below
    name = _name(path)
    try:
        found = (scan_xtc if fmt == "XTC" else scan_trr)(path, 1 if first_only else -1, partial_last=dropped)
    except OSError as exc:
        raise InputFileError(name, f"cannot be read as {fmt}: {_one_line(exc)}") from None
    except XDRFormatError as exc:
        if strict or first_only or not len(exc.offsets):
            hint = ""
            if strict and "cut short" in str(exc):
                hint = " (without --strict its complete frames are read)"
            elif strict and len(exc.offsets):
                hint = " (without --strict the whole frames before it are read)"
            raise InputFileError(name, f"cannot be read as {fmt}: {_one_line(exc)}{hint}") from None
        log.warning("%s: damaged after frame %d: %s; the %d whole frames before byte %d are read, nothing after "
                    "them (--strict refuses such a file)", name, len(exc.offsets) - 1, _one_line(exc),
                    len(exc.offsets), int(exc.complete_bytes))
        if damaged is not None:
            damaged.append(f"damaged after frame {len(exc.offsets) - 1} (byte {int(exc.complete_bytes)}): "
                           f"{_one_line(exc)}")
        return exc.n_atoms, exc.offsets, exc.fields, exc.steps, exc.times
    if dropped and not first_only:
        frame, offset, present, declared = dropped[0]
        if strict:
            raise InputFileError(name, f"cannot be read as {fmt}: frame {frame} at byte {offset} is cut short "
                                       f"(the file ends at byte {offset + present}) (without --strict its "
                                       "complete frames are read)")
        log.warning("%s: its last frame (frame %d at byte %d) is cut short: %d of its %d bytes are in the "
                    "file; the %d complete frames are read (--strict refuses such a file)",
                    name, frame, offset, present, declared, frame)
    return found


def _remote_scan(obj, fmt: str, strict: bool | None) -> tuple:
    """``(n_atoms, offsets, fields, steps, times, damaged)`` of the XTC/TRR object ``obj``: from the local
    offsets cache (keyed by its URL, ETag and size), else from one scan of its headers through large cached
    blocks (a few requests, never one per frame), then cached. Only a clean scan (no damage, no cut-short
    last frame) is cached, so ``--strict`` is never answered from a cache of a lenient scan."""
    from .offsets import load_offsets, save_offsets, scan_file

    found = load_offsets(obj, fmt)
    if found is not None:
        return (found["n_atoms"], found["offsets"], found["fields"], found["steps"], found["times"], None)
    before = obj.stats.requests
    fh = scan_file(obj)
    damage: list[str] = []
    try:
        n_atoms, offsets, fields, steps, times = _scan_xdr(fh, fmt, strict=True)
        clean = True
    except InputFileError:
        if (_STRICT.get() if strict is None else strict):
            raise
        n_atoms, offsets, fields, steps, times = _scan_xdr(fh, fmt, strict=False, damaged=damage)
        clean = False
    log.debug("%s: frame offsets scanned (%d frames) in %d requests", obj.url, len(offsets),
              obj.stats.requests - before)
    if clean:
        save_offsets(obj, fmt, {"n_atoms": n_atoms, "offsets": offsets, "fields": fields, "steps": steps,
                                "times": times})
    return n_atoms, offsets, fields, steps, times, (damage[0] if damage else None)


def _xdr_format(head: bytes) -> str | None:
    """XTC or TRR from a file's first 24 bytes (its magic number; a TRR's version string), else None."""
    if len(head) < 8:
        return None
    magic = struct.unpack(">i", head[:4])[0]
    if magic == 1995:
        return "XTC"
    return "TRR" if magic == 1993 and b"GMX_trn_file" in head else None


def _is_path(path) -> bool:
    """A file's path (str, bytes, os.PathLike), not a file-like object holding its bytes."""
    return isinstance(path, (str, bytes, os.PathLike))


def _name(path) -> str:
    """How a message names the file: its path, or a file-like object's ``name`` (its type's without one)."""
    if _is_path(path):
        return os.fsdecode(path)
    try:
        return str(path.name)
    except AttributeError:
        return type(path).__name__


def scan_part(path, strict: bool | None = None) -> dict:
    """``{"path", "format", "n_frames", "n_atoms", "offsets"}`` of an XTC/TRR from its frame headers
    (no coordinates read). A cut-short last frame, or damage after whole frames, is left out with a
    warning, or refused with ``strict`` (default: :func:`refuse_partial_frames`'s setting).

    ``path`` may be a binary file-like object (``seek``/``tell``/``read``) holding an XTC or a TRR,
    as a remote byte store hands one out: the offsets index is the same scan, with the same checks,
    wherever the bytes are (``"path"`` is then the object's ``name``)."""
    name = _name(path)
    if not _is_path(path):
        path.seek(0)
        head = bytes(path.read(24) or b"")
        fmt = _xdr_format(head)
    else:
        fmt = XDRSource.guess_format(path) or XDRSource.suffixes.get(Path(path).suffix.lower())
    if fmt is None:
        raise InputFileError(name, "is not an XTC or TRR file")
    n_atoms, offsets, *_ = _scan_xdr(path, fmt, strict=strict)
    log.debug("%s: frame offsets scanned (%d frames)", name, len(offsets))
    return {"path": name, "format": fmt, "n_frames": len(offsets), "n_atoms": n_atoms,
            "offsets": encode_offsets(offsets)}


class XDRSource(OneFileSource):
    """Frames of one XTC or TRR file, read by the compiled xdrfile at known frame offsets, without a topology.

    Parameters
    ----------
    path
        The trajectory file.
    n_atoms
        Atoms per frame, if known (checked against the file).
    offsets
        Byte offset of every frame, as :func:`scan_part` found them
        (:func:`encode_offsets`' string or an array); None scans the file here
        (behind a URL: the local offsets cache, else one scan in large blocks).
    format
        ``"XTC"`` or ``"TRR"`` (default: from the file's magic number, else its extension).
    strict
        A last frame cut short: refused (True) or left out with a warning
        (False); None: :func:`refuse_partial_frames`'s setting.
    storage_options, identity, round_trip
        For a URL: the options it is read with (default: the run's), the
        object's identity (ETag, size) and the shortest round trip the
        preparing process saw.
    """

    kind = "xdr"
    formats = XDR_FORMATS
    suffixes = MappingProxyType({".xtc": "XTC", ".trr": "TRR"})
    description = "GROMACS XTC and TRR, read by the xdrfile library compiled into trajscale"
    supports_parts = True
    fills_rows = True
    worker_modules = ("trajscale.xdr._xdr",)
    supports_following = True
    ships_offsets = True
    reads_urls = True

    def __init__(self, path: str, n_atoms: int | None = None, offsets: str | np.ndarray | None = None,
                 format: str | None = None, strict: bool | None = None, storage_options: dict | None = None,
                 identity: list | None = None, round_trip: float | None = None) -> None:
        self._path = str(path)
        self._remote = None
        if is_url(self._path):
            from ..storage.objects import Identity, RemoteObject

            self._remote = RemoteObject.open(self._path, storage_options, Identity.of(identity), round_trip)
        self._format = (format or self.guess_format(self._path) or self.suffixes.get(
            Path(self._path).suffix.lower()) or "XTC").upper()
        if self._format not in XDR_FORMATS:
            raise InputFileError(self._path, f"{self._format} is not read by {type(self).__name__} (XTC, TRR)")
        self._file = None
        self.bytes_read = 0
        self._headers = None   # every frame's (step, time) when the scan here read them
        self.damaged = None
        if offsets is None and self._remote is not None:   # the offsets cache, else one scan in large blocks
            n_found, offsets, self._fields, *self._headers, self.damaged = _remote_scan(
                self._remote, self._format, strict)
            self._headers = self._headers[:2]
        elif offsets is None:   # scanned here: only when no offsets were shipped
            damage: list[str] = []
            n_found, offsets, self._fields, *self._headers = _scan_xdr(self._path, self._format, strict=strict,
                                                                       damaged=damage)
            self.damaged = damage[0] if damage else None
            log.debug("%s: frame offsets scanned (%d frames)", self._path, len(offsets))
        elif self._format == "XTC" and n_atoms is not None:   # shipped: nothing to read before the frames
            n_found, self._fields = int(n_atoms), ("position",)
        else:   # a TRR's fields, from its first frame's header
            n_found, _, self._fields, *_ = _scan_xdr(self._scan_target(), self._format, first_only=True)
        self._offsets = decode_offsets(offsets) if isinstance(offsets, str) else np.asarray(offsets, np.int64)
        if len(self._offsets) and "position" not in self._fields:   # a Block always holds positions
            raise InputFileError(self._path, f"its {self._format} frames hold no positions (only "
                                             f"{', '.join(self._fields) or 'no coordinates'}): trajscale reads "
                                             "trajectories by their positions")
        # Only a complete frame vouches for its header's atom count (the scan bounds it by the frame's
        # bytes): with none, e.g. one frame cut short, no decode buffer of that count is made.
        if self._remote is None:
            self._file = _xdr_file(self._path, self._format, n_found if len(self._offsets) else 0)
        elif len(self._offsets) and int(self._offsets[-1]) >= self._remote.size:
            raise InputFileError(self._path, f"its frame offsets reach byte {int(self._offsets[-1])}, past the "
                                             f"object's {self._remote.size} bytes: the object is not the one "
                                             "they were found in")
        self._n_atoms, self._n_frames = n_found, len(self._offsets)
        if n_atoms is not None and int(n_atoms) != self._n_atoms:
            self.close()
            raise InputFileError(self._path, f"has {self._n_atoms} atoms per frame, expected {n_atoms}")

    def _scan_target(self):
        """What a header scan reads: the file's path, or a caching file object over the remote object."""
        if self._remote is None:
            return self._path
        from ..storage.fileobj import CachingFile

        return CachingFile(self._remote)

    @classmethod
    def guess_format(cls, path: str) -> str | None:
        """XTC (magic 1995) or TRR (magic 1993, then the ``GMX_trn_file`` version string)."""
        return _xdr_format(file_head(path, 24))

    @classmethod
    def open(cls, path: str, request: OpenRequest) -> XDRSource:
        shipped = request.shipped if is_url(str(path)) else None   # a part's options and identity (remote_state)
        return cls(path, n_atoms=request.n_atoms, offsets=request.offsets, format=request.format,
                   strict=request.strict, **(shipped or {}))

    def remote_state(self) -> dict | None:
        """An object behind a URL: the options it is read with, its identity and round trip, for a segment
        index to ship with the part (a worker opens it with them, without a request); None for a local file."""
        return None if self._remote is None else self._remote.state()

    @property
    def native_units(self) -> dict[str, str]:
        """The units the file stores (MDAnalysis's ``XTCReader.units``, ``TRRReader.units``)."""
        return dict(XDR_UNITS[self._format])

    def frame_times(self) -> tuple[np.ndarray, np.ndarray]:
        """Times and steps from the frames' headers (no coordinates decoded; read by the open's own scan)."""
        if self._headers:
            steps, times = self._headers
        elif self._remote is not None:
            steps, times = _remote_scan(self._remote, self._format, None)[3:5]
        else:
            steps, times = _scan_xdr(self._path, self._format)[3:]
        return np.asarray(times, np.float64), np.asarray(steps, np.int64)

    def get_config(self) -> dict:
        config = {"kind": self.kind, "path": self._path, "n_atoms": self._n_atoms,
                  "offsets": encode_offsets(self._offsets), "format": self._format}
        config.update(self.remote_state() or {})
        return config

    def remote_stats(self) -> dict | None:
        """What reading this source's object cost (requests, bytes, wait_s, retries); None for a local file."""
        return None if self._remote is None else self._remote.stats.as_dict()

    def step_time(self, frame: int) -> tuple[int, float]:
        """An XTC frame's step and time from its header (XDR: magic, natoms, step, time), no coordinates
        decoded: joining 10,000 parts reads a few per part."""
        if self._format != "XTC":
            return super().step_time(frame)
        self.check_range(frame, frame + 1)
        at = int(self._offsets[frame])
        if self._remote is not None:
            head = self._remote.read_ranges([(at, min(at + 16, self._remote.size))])[0]
        else:
            with open(self._path, "rb") as fh:
                fh.seek(at)
                head = fh.read(16)
        if len(head) < 16:
            raise InputFileError(self._path, f"cannot read frame {frame} (truncated?)")
        _, _, step, time = struct.unpack(">iiif", head)
        return int(step), float(np.float32(time))

    def read(self, start: int, stop: int, atoms: np.ndarray | None = None,
             fields: tuple[str, ...] = ("position",), stride: int = 1) -> Block:
        return self._read_rows(start, stop, atoms, fields, stride)

    def read_into(self, start: int, stop: int, atoms: np.ndarray | None, stride: int,
                  out: dict[str, np.ndarray], box: np.ndarray, time: np.ndarray, step: np.ndarray) -> None:
        """Frames read by the compiled xdrfile, the GIL released; units (nm -> Å, ...) applied to the
        selected atoms only, as they are copied out of the frame."""
        from ._xdr import XDRFormatError

        sel = None if atoms is None else np.asarray(atoms, dtype=np.intp)
        frames = np.arange(start, stop, stride, dtype=np.int64)
        if len(frames):
            edges = np.empty((len(frames), 3, 3), np.float32)
            try:
                if self._remote is not None:
                    self._read_remote(frames, sel, out, edges, time, step)
                else:
                    self._file.read(self._offsets, frames, sel, out, edges, time, step, XDR_SCALE)
            except (OSError, XDRFormatError) as exc:
                raise InputFileError(self._path, _one_line(exc)) from None
            box[:] = _xdr_box(edges)
        self.bytes_read += sum(a.nbytes for a in out.values())

    def _read_remote(self, frames, sel, out, edges, time, step) -> None:
        """The frames' bytes fetched by range requests (consecutive frames in one span, large spans as
        concurrent requests) into an in-memory file, decoded there by the compiled xdrfile."""
        from ._xdr import TRRFile, XTCFile
        from .offsets import fetch_frames

        fd, base = fetch_frames(self._remote, self._offsets, frames)
        try:
            where = f"/proc/self/fd/{fd}"
            handle = (XTCFile if self._format == "XTC" else TRRFile)(where, self._n_atoms)
            try:
                handle.read(self._offsets - base, frames, sel, out, edges, time, step, XDR_SCALE)
            except (OSError, ValueError) as exc:   # XDRFormatError is a ValueError: named by the URL
                raise InputFileError(self._path, _one_line(exc).replace(where, self._path)) from None
            finally:
                handle.close()
        finally:
            os.close(fd)

    def close(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            try:
                handle.close()
            except OSError:
                pass


def _xdr_box(edges: np.ndarray) -> np.ndarray:
    """Box dimensions (Å, degrees) from the stored nm vectors: angles first, then lengths to Å, in
    MDAnalysis's order (triclinic_box, then convert_pos_from_native), so the box equals its to the last bit."""
    dims = edges_to_dimensions(edges)
    dims[:, :3] *= np.float32(10.0)
    return dims
