"""An H5MD file still being written, as ``run --follow`` sees it at each poll: its complete frames.

The file is opened afresh at each poll (HDF5 caches metadata per open) without HDF5's file lock, which the
writer holds; a read that meets the writer mid-flush is tried again.
"""

from __future__ import annotations

import logging
import time

from ..errors import InputFileError
from ..sources.follow import Snapshot
from .source import H5MDSource
from .traits import GROWING_H5MD

log = logging.getLogger(__name__)


#: Seconds to wait before each new attempt at a read that met the writer mid-flush.
RETRY_WAITS = (0.05, 0.2, 0.5, 1.0, 2.0)
#: What HDF5 (through h5py and trajscale's open) raises on metadata caught half-updated.
MID_FLUSH = (OSError, RuntimeError, KeyError, IndexError, ValueError, InputFileError)


class GrowingH5MDSource(H5MDSource):
    """An H5MD file another process is writing: a read meeting the writer mid-flush is tried again, reopened."""

    traits = GROWING_H5MD
    # The writer holds HDF5's lock; HDF5_USE_FILE_LOCKING is read at the process's first open, so every open says.
    file_locking = False

    def __init__(self, path: str, **options) -> None:
        self._open_looking_again(path=path, **options)

    def _open_looking_again(self, **config) -> None:
        """H5MDSource's open, looked at again while it meets the writer mid-flush (:data:`RETRY_WAITS`)."""
        for wait in RETRY_WAITS:
            try:
                H5MDSource.__init__(self, **config)
                break
            except MID_FLUSH as exc:
                log.debug("%s: opened while the writer flushed (%s); again in %g s", config["path"], exc, wait)
            time.sleep(wait)
        else:
            H5MDSource.__init__(self, **config)
        # the writer fills reserved rows and rewrites metadata in place, at the same size: still this file
        self.store.being_written()

    def read(self, start: int, stop: int, atoms=None, fields: tuple[str, ...] = ("position",), stride: int = 1):
        # the caller's mistakes (range, fields, atoms) are refused at once: no flush of the writer mends them
        self.checked_request(start, stop, atoms, fields)
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
        self._open_looking_again(**config)   # (the reopen may meet the writer mid-flush too)
        self.reuse_buffers = reuse


class QuietInFlight(logging.Filter):
    """A file being written has rows reserved past its last complete frame: not worth a repair warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "after the last complete frame" not in record.getMessage()


def _h5md_snapshot(path: str, group: str | None, assume_units: str | None) -> Snapshot:
    import h5py

    from .writer import COMPLETE_ATTR

    with h5py.File(path, "r", locking=False) as f:
        finished = bool(f.attrs.get(COMPLETE_ATTR, False))
    quiet = QuietInFlight()
    schema_log = logging.getLogger("trajscale.h5md.schema")
    schema_log.addFilter(quiet)
    try:
        source = GrowingH5MDSource(path, group=group, assume_units=assume_units)
    finally:
        schema_log.removeFilter(quiet)
    return Snapshot(source, source.n_frames, finished)


def hdf5_snapshot(path: str, fmt: str, topology, group, assume_units) -> Snapshot:
    """An H5MD file's complete frames now (:attr:`.source.H5MDSource.snapshots`)."""
    try:
        return _h5md_snapshot(path, group, assume_units)
    except MID_FLUSH as exc:   # caught mid-flush: the next poll sees it whole
        raise InputFileError(path, f"not readable at this instant ({exc})") from None


__all__ = ["MID_FLUSH", "RETRY_WAITS", "GrowingH5MDSource", "QuietInFlight", "hdf5_snapshot"]
