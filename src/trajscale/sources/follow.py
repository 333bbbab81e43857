"""Trajectories still being written: how many of their frames are complete now, and whether they will grow.

A follower (``trajscale run --follow``) takes a :class:`Snapshot` of the
trajectory at every poll: a Source opened on the frames that are whole at that
instant, and whether the writer has said the file is finished.

* H5MD: the length of ``step`` (``store.schema.complete_frames``): trajscale's
  writers grow it only after a frame's data is flushed, so every frame counted
  is whole. The file is opened afresh at each poll (HDF5 caches metadata per
  open) without HDF5's file lock, which the writer holds. A writer that closes
  normally sets the root attribute ``trajscale_complete``
  (:data:`~trajscale.store.writer.COMPLETE_ATTR`); a killed one never does.
* XTC/TRR: the frames whose every byte is in the file (the compiled header scan
  of :mod:`._xdr` in its mode for growing files, which ends at the frame being
  appended, whatever byte the writer has reached in it). These formats
  have no end marker: a file ``TRAJ.done`` beside the trajectory says it.
* A segment index: the parts it lists now; ``INDEX.done`` ends it.

An open that catches the writer mid-flush fails and counts as "no news" until
the next poll.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputFileError
from .base import Source
from .h5md import H5MDSource

log = logging.getLogger(__name__)

#: A sidecar file whose existence says the trajectory beside it is finished (formats without a marker).
DONE_SUFFIX = ".done"


#: Seconds to wait before each new attempt at a read that met the writer mid-flush.
RETRY_WAITS = (0.05, 0.2, 0.5, 1.0, 2.0)
#: What HDF5 (through h5py and trajscale's open) raises on metadata caught half-updated.
MID_FLUSH = (OSError, RuntimeError, KeyError, IndexError, ValueError, InputFileError)


class GrowingH5MDSource(H5MDSource):
    """An H5MD file another process is writing: a read that meets the writer mid-flush is tried again.

    The writer updates the file's metadata (extents, chunk index) in place; a
    reader without SWMR can catch a node half-updated and get an HDF5 error.
    The frames asked for are complete (counted by :func:`snapshot`), so the
    same read, after the file is opened afresh, finds them whole.
    """

    kind = "growing_h5md"
    supports_mpio = False

    def __init__(self, path: str, **options) -> None:
        for wait in RETRY_WAITS:
            try:
                super().__init__(path, **options)
                return
            except MID_FLUSH as exc:
                log.debug("%s: opened while the writer flushed (%s); again in %g s", path, exc, wait)
            time.sleep(wait)
        super().__init__(path, **options)

    def read(self, start: int, stop: int, atoms=None, fields: tuple[str, ...] = ("position",), stride: int = 1):
        for wait in RETRY_WAITS:
            try:
                return super().read(start, stop, atoms, fields, stride=stride)
            except MID_FLUSH as exc:
                log.debug("%s: frames [%d, %d) met the writer mid-flush (%s); reading again in %g s",
                          self.path, start, stop, exc, wait)
            time.sleep(wait)
            self._reopen()
        return super().read(start, stop, atoms, fields, stride=stride)

    def _reopen(self) -> None:
        config = self.get_config()
        del config["kind"]
        reuse = self.reuse_buffers
        self.close()   # every handle: HDF5 rereads the metadata only of a file it closed
        self.__dict__.pop("_scratch", None)
        H5MDSource.__init__(self, **config)
        self.reuse_buffers = reuse


@dataclass(frozen=True)
class Snapshot:
    """A trajectory at one instant: ``source`` open on its ``n_frames`` complete frames; ``finished``
    when the writer said no frame will follow (read before the frames counted, so none is missed)."""

    source: Source
    n_frames: int
    finished: bool
    #: Bytes after the last whole frame of a finished XTC/TRR (its writer stopped inside a frame).
    torn_bytes: int = 0

    def warn_torn_end(self) -> None:
        """Say, once per follow (the caller's last snapshot, not every poll), that a finished file
        ends inside a frame that is not read."""
        if self.finished and self.torn_bytes > 0:
            log.warning("%s: marked finished, but its last %d bytes are not a whole frame (the writer stopped "
                        "inside frame %d); the %d whole frames are read", self.source.path, self.torn_bytes,
                        self.n_frames, self.n_frames)


def unlocked_reads() -> None:
    """Read without HDF5's file lock: the writer holds it (workers started later inherit this)."""
    os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")


class QuietInFlight(logging.Filter):
    """A file being written has rows reserved past its last complete frame: not worth a repair warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "after the last complete frame" not in record.getMessage()


def _h5md_snapshot(path: str, group: str | None, assume_units: str | None) -> Snapshot:
    import h5py

    from ..store.writer import COMPLETE_ATTR

    with h5py.File(path, "r", locking=False) as f:
        finished = bool(f.attrs.get(COMPLETE_ATTR, False))
    quiet = QuietInFlight()
    schema_log = logging.getLogger("trajscale.store.schema")
    schema_log.addFilter(quiet)
    try:
        source = GrowingH5MDSource(path, group=group, assume_units=assume_units)
    finally:
        schema_log.removeFilter(quiet)
    return Snapshot(source, source.n_frames, finished)


def complete_xdr_offsets(path: str, fmt: str):
    """``(n_atoms, offsets, complete_bytes)`` of the frames of an XTC/TRR whose bytes are all in the file now.

    One scan (:func:`._xdr.scan_growing`): it ends at the frame being appended, whatever byte the
    writer has reached in it; ``complete_bytes`` is where the last whole frame ends.
    """
    from ._xdr import XDRFormatError, scan_growing

    try:
        return scan_growing(path, fmt)
    except XDRFormatError as exc:
        raise InputFileError(path, f"cannot be read as {fmt}: {exc}") from None


def _xdr_snapshot(path: str, fmt: str) -> Snapshot:
    from .parts import XDRSource

    finished = Path(path + DONE_SUFFIX).exists()
    n_atoms, offsets, complete_bytes = complete_xdr_offsets(path, fmt)
    if not len(offsets):
        raise InputFileError(path, "no complete frame yet")
    torn = os.path.getsize(path) - complete_bytes if finished else 0
    return Snapshot(XDRSource(path, n_atoms=n_atoms, offsets=offsets, format=fmt), len(offsets), finished,
                    max(0, torn))


def snapshot(trajectory, topology=None, *, group: str | None = None, assume_units: str | None = None) -> Snapshot:
    """The trajectory's complete frames now.

    Raises
    ------
    InputFileError
        Nothing readable yet (no file, no complete frame, or the writer is mid-flush): poll again.
    """
    from .registry import format_sources, guess

    path = str(trajectory)
    unlocked_reads()
    if not os.path.exists(path):
        raise InputFileError(path, "does not exist yet")
    if os.path.isfile(path) and os.path.getsize(path) == 0:   # created, nothing written: no format to tell yet
        raise InputFileError(path, "no complete frame yet")
    match = guess(path)   # the format registry: the Source that reads it, and whether it can be followed
    take = _SNAPSHOTS.get(match.kind) if match.source.supports_following else None
    if take is None:
        followable = ", ".join(f for cls in format_sources() if cls.supports_following for f in cls.formats)
        raise InputFileError(path, f"cannot be followed: {match.format} files are read whole; the formats "
                                   f"that can be: {followable}")
    return take(path, match.format, topology, group, assume_units)


def _index_snapshot(path: str, fmt: str, topology, group, assume_units) -> Snapshot:
    from . import open_source

    finished = Path(path + DONE_SUFFIX).exists()
    source = open_source(path, topology, group=group, assume_units=assume_units)
    return Snapshot(source, source.n_frames, finished)


def _hdf5_snapshot(path: str, fmt: str, topology, group, assume_units) -> Snapshot:
    try:
        return _h5md_snapshot(path, group, assume_units)
    except MID_FLUSH as exc:   # caught mid-flush: the next poll sees it whole
        raise InputFileError(path, f"not readable at this instant ({exc})") from None


#: Source kind (as the format registry names it) -> how a snapshot of its file is taken; the kinds
#: whose Source declares ``supports_following``.
_SNAPSHOTS = {"segments": _index_snapshot, "h5md": _hdf5_snapshot,
              "xdr": lambda path, fmt, *_: _xdr_snapshot(path, fmt)}


__all__ = ["DONE_SUFFIX", "GrowingH5MDSource", "QuietInFlight", "Snapshot", "complete_xdr_offsets", "snapshot",
           "unlocked_reads"]
