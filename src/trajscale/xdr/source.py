"""One XTC or TRR file, opened without a Universe: a trajectory, or a part of a chain.

Frames are read by the xdrfile C library that MDAnalysis's readers use, compiled in: the same bits without
importing MDAnalysis.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from ..box import edges_to_dimensions
from ..errors import InputFileError
from ..sources.base import OneFileSource, OpenRequest, file_head
from ..storage.bytestore import ByteStore
from ..storage.location import Location
from .offsets import (
    decode_offsets,
    encode_offsets,
    first_frame,
    frame_spans,
    index,
    one_line,
    refuse_partial_frames,
    scan_part,
    xdr_format,
)
from .traits import XDR

#: Formats read by the compiled xdrfile (:mod:`._xdr`) at shipped frame offsets.
XDR_FORMATS = ("XTC", "TRR")
#: Bytes of a file's head that tell XTC from TRR (the magic number; a TRR's version string).
HEAD_BYTES = 24
#: How another process opens an object's bytes (``ByteStore.state``): its location's options, identity, round trip.
STORE_STATE = ("storage_options", "identity", "round_trip")
#: GROMACS units to MDAnalysis's (nm -> Å; kJ/(mol nm) -> kJ/(mol Å)), per field.
XDR_SCALE = {"position": np.float32(10.0), "velocity": np.float32(10.0), "force": np.float32(0.1)}
#: The units XTC and TRR store (MDAnalysis's ``XTCReader.units``, ``TRRReader.units``).
XDR_UNITS = {"XTC": {"time": "ps", "length": "nm"},
             "TRR": {"time": "ps", "length": "nm", "velocity": "nm/ps", "force": "kJ/(mol*nm)"}}


def _decoder(fmt: str, n_atoms: int):
    """What opens an XTC or TRR for reading frames at known offsets (xdrfile, compiled into trajscale)."""
    from ._xdr import TRRFile, XTCFile

    kind = XTCFile if fmt == "XTC" else TRRFile
    return lambda path: kind(path, n_atoms)


class XDRSource(OneFileSource):
    """Frames of one XTC or TRR file, read by the compiled xdrfile at known frame offsets, without a topology.

    Parameters
    ----------
    path
        The trajectory file: a local path or a URL.
    n_atoms
        Atoms per frame, if known (checked against the file).
    offsets
        Byte offset of every frame (:func:`~.offsets.encode_offsets`' string or an array); None:
        :func:`~.offsets.index`.
    format
        ``"XTC"`` or ``"TRR"`` (default: from the file's magic number, else its extension).
    strict
        A last frame cut short: refused (True) or left out with a warning (False); None: the process's setting.
    store
        The file's bytes, opened already by the registry (read through, closed with the Source).
    **state
        For a URL (:data:`STORE_STATE`): ``storage_options``, the object's ``identity`` and the preparing
        process's ``round_trip`` (:meth:`~trajscale.storage.bytestore.ByteStore.state`).
    """

    traits = XDR

    def __init__(self, path: str | Location, n_atoms: int | None = None, offsets: str | np.ndarray | None = None,
                 format: str | None = None, strict: bool | None = None, store: ByteStore | None = None,
                 **state) -> None:
        from ..storage.files import as_file

        unknown = set(state) - set(STORE_STATE)
        if unknown:
            raise TypeError(f"XDRSource got unexpected arguments {', '.join(sorted(unknown))}")
        where = Location.of(path, state.get("storage_options"))   # (a config's: the preparing process's store's)
        self._path = where.where
        self._view = None
        if store is None:
            store = where.store(state.get("identity"), state.get("round_trip"))
        self._store = store
        self._format = (format or xdr_format(self._store.first_bytes(HEAD_BYTES))
                        or self.suffixes.get(Path(self._path).suffix.lower()) or "XTC").upper()
        if self._format not in XDR_FORMATS:
            raise InputFileError(self._path, f"{self._format} is not read by {type(self).__name__} (XTC, TRR)")
        self.bytes_read = 0
        self._headers = None   # every frame's (step, time) when the scan here read them
        self.damaged = None
        if offsets is None:   # the offsets index (which opens the view): only when no offsets were shipped
            self._view, n_found, offsets, self._fields, *self._headers, self.damaged = index(
                self._store, self._format, strict)
        else:
            self._view = as_file(self._store)
            if self._format == "XTC" and n_atoms is not None:   # shipped: nothing to read before the frames
                n_found, self._fields = int(n_atoms), ("position",)
            else:   # a TRR's fields, from its first frame's header
                n_found, _, self._fields, *_ = first_frame(self._view, self._format)
        self._offsets = decode_offsets(offsets) if isinstance(offsets, str) else np.asarray(offsets, np.int64)
        if len(self._offsets) and "position" not in self._fields:   # a Block always holds positions
            raise InputFileError(self._path, f"its {self._format} frames hold no positions (only "
                                             f"{', '.join(self._fields) or 'no coordinates'}): trajscale reads "
                                             "trajectories by their positions")
        if len(self._offsets) and int(self._offsets[-1]) >= self._store.size:
            raise InputFileError(self._path, f"its frame offsets reach byte {int(self._offsets[-1])}, past its "
                                             f"{self._store.size} bytes: it is not the file they were found in")
        # only a complete frame vouches for its header's atom count: a decoder (and its buffer) is made to read
        self._n_atoms, self._n_frames = n_found, len(self._offsets)
        self._open = _decoder(self._format, self._n_atoms)
        if n_atoms is not None and int(n_atoms) != self._n_atoms:
            self.close()
            raise InputFileError(self._path, f"has {self._n_atoms} atoms per frame, expected {n_atoms}")

    @property
    def store(self):
        """The file's bytes (a :class:`~trajscale.storage.bytestore.ByteStore`), which the index and the reader read."""
        return self._store

    @classmethod
    def guess_format(cls, path: str, store: ByteStore | None = None) -> str | None:
        """XTC (magic 1995) or TRR (magic 1993, then the ``GMX_trn_file`` version string)."""
        return xdr_format(file_head(path, HEAD_BYTES, store))

    @classmethod
    def open(cls, location: Location, request: OpenRequest) -> XDRSource:
        return cls(location, n_atoms=request.n_atoms, offsets=request.offsets, format=request.format,
                   strict=request.strict, store=request.store, **(request.shipped or {}))

    def remote_state(self) -> dict | None:
        """What another process opens the file's bytes with, without a request (shipped per part); None if local."""
        return self._store.state()

    @property
    def native_units(self) -> dict[str, str]:
        """The units the file stores (MDAnalysis's ``XTCReader.units``, ``TRRReader.units``)."""
        return dict(XDR_UNITS[self._format])

    def frame_times(self) -> tuple[np.ndarray, np.ndarray]:
        """Times and steps from the frames' headers (no coordinates decoded; read by the open's own scan)."""
        steps, times = self._headers or index(self._store, self._format, view=self._view)[4:6]
        return np.asarray(times, np.float64), np.asarray(steps, np.int64)

    def get_config(self) -> dict:
        config = {"kind": self.kind, "path": self._path, "n_atoms": self._n_atoms,
                  "offsets": encode_offsets(self._offsets), "format": self._format}
        config.update(self._store.state() or {})
        return config

    def remote_stats(self) -> dict | None:
        """Network cost of this source's reads (requests, bytes, wait_s, retries); None for a local file."""
        return self._store.fetched()

    def frame_header(self, frame: int) -> tuple[int, float, np.ndarray]:
        """An XTC frame's step, time and box from its header (the bits a read gives), no coordinates decoded."""
        if self._format != "XTC":
            return super().frame_header(frame)
        self.check_range(frame, frame + 1)
        at = int(self._offsets[frame])
        head = self._store.read_ranges([(at, min(at + 52, self._store.size))])[0]   # (magic, atoms, step, time, box)
        if len(head) < 52:
            raise InputFileError(self._path, f"cannot read frame {frame} (truncated?)")
        _, _, step, time = struct.unpack(">iiif", head[:16])
        box = _xdr_box(np.frombuffer(head, ">f4", 9, 16).astype(np.float32).reshape(1, 3, 3))
        return int(step), float(np.float32(time)), box

    read = OneFileSource._read_rows

    def read_into(self, start: int, stop: int, atoms: np.ndarray | None, stride: int,
                  out: dict[str, np.ndarray], box: np.ndarray, time: np.ndarray, step: np.ndarray) -> None:
        """Frames read by the compiled xdrfile, the GIL released; units applied to the selected atoms as copied out."""
        from ._xdr import XDRFormatError

        sel = None if atoms is None else np.asarray(atoms, dtype=np.intp)
        frames = np.arange(start, stop, stride, dtype=np.int64)
        if len(frames):
            edges = np.empty((len(frames), 3, 3), np.float32)
            def spans():   # (the frames' bytes, for a view that fetches them)
                return frame_spans(self._offsets, self._store.size, frames)

            try:
                with self._view.holding(spans, self._open) as decoder:
                    decoder.read(self._offsets, frames, sel, out, edges, time, step, XDR_SCALE)
            except (OSError, ValueError, XDRFormatError) as exc:   # (XDRFormatError is a ValueError)
                raise InputFileError(self._path, self._view.shown(one_line(exc))) from None
            box[:] = _xdr_box(edges)
        self.bytes_read += sum(a.nbytes for a in out.values())

    def close(self) -> None:
        view, self._view = self._view, None
        if view is not None:
            view.close()


def _xdr_box(edges: np.ndarray) -> np.ndarray:
    """Box dimensions (Å, degrees) from the stored nm vectors: angles first, then lengths to Å, in
    MDAnalysis's order (triclinic_box, then convert_pos_from_native), so the box equals its to the last bit."""
    dims = edges_to_dimensions(edges)
    dims[:, :3] *= np.float32(10.0)
    return dims


__all__ = ["XDRSource", "XDR_FORMATS", "XDR_SCALE", "XDR_UNITS", "decode_offsets", "encode_offsets",
           "refuse_partial_frames", "scan_part"]
