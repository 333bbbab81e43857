"""An H5MD file opened for reading: its bytes (a byte store) and HDF5's view of them, local or behind a URL.

The one place where a file behind a URL differs from a local one, decided once from its byte store:

* a store with a local path: HDF5 opens the file there with its own driver (or MPI-IO's), and the chunk reader
  reads frames through the store's descriptor;
* any other store: HDF5 opens a caching file object over it (:mod:`.metadata`), from the shipped metadata where
  there is some, and frames are read by concurrent range requests; what the preparing process found travels
  with the job (:meth:`OpenedFile.state`).

Everything above (:class:`~.source.H5MDSource`) asks an :class:`OpenedFile`, never the path.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import h5py

from ..storage.bytestore import ByteStore
from ..storage.location import Location
from .hdf5 import open_h5

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileRequest:
    """How a Source asks for its file: driver (``"mpio"`` with ``comm``), file lock (None: HDF5's default), chunk
    cache, what the preparing process found (``shipped``; None there) and the caller's ``store``."""

    driver: str | None = None
    comm: object = None
    locking: bool | None = None
    rdcc_nbytes: int = 0
    shipped: dict | None = None
    #: The file's bytes, opened already by the caller (the format registry's): not opened again.
    store: ByteStore | None = None


class OpenedFile:
    """An H5MD file open for reading: its bytes (:attr:`store`) and HDF5's view of them (:attr:`file`)."""

    #: True when each read waits on a round trip (a URL): reads go in large batches, and fetch ahead.
    latency_bound: bool = False
    #: True when HDF5 reads the file's bytes itself (its own driver), as fast as the chunk reader would.
    hdf5_reads_chunks: bool = True
    #: True when MPI ranks can open the file together (MPI-IO reads a file system's files).
    opens_collectively: bool = True

    def __init__(self, store: ByteStore, request: FileRequest) -> None:
        self.store = store
        self.driver = request.driver
        if request.driver == "mpio":
            from ..parallel import require_parallel_h5py

            require_parallel_h5py()
        lock = {} if request.locking is None else {"locking": request.locking}
        #: HDF5's view, opened from the store (a local file: by its path, with HDF5's own driver or MPI-IO's)
        self.file: h5py.File = open_h5(store, "r", driver=request.driver, comm=request.comm,
                                       rdcc_nbytes=request.rdcc_nbytes, **lock)

    @property
    def reads_at_addresses(self) -> bool:
        """True when frames are read at their chunks' byte addresses (not under MPI-IO)."""
        return self.driver != "mpio"

    def state(self) -> dict | None:
        """What a worker opens the file with, without a request (None: its path says it all)."""
        return None

    def fetched(self) -> dict | None:
        """What reading the file has cost over the network (None: local)."""
        return self.store.fetched()

    def failure(self) -> Exception | None:
        """The error behind a read HDF5 reported as failed (the store's: missing, replaced, unreachable)."""
        return None

    def fetch_ahead(self, datasets) -> None:
        """A hint: ``datasets`` are read next (a local file: nothing to do)."""

    def metadata(self, preload) -> list | None:
        """The HDF5 metadata bytes workers open the file from (None: they open it themselves)."""
        return None

    def keep_metadata(self) -> None:
        """Keep the HDF5 metadata read so far for the next open of the same object, where this process prepares."""

    def close(self) -> None:
        with contextlib.suppress(Exception):   # closing never raises: it may run during interpreter shutdown
            if self.file.id.valid:
                self.file.close()
        self.store.close()


class RemoteFile(OpenedFile):
    """An H5MD file behind a URL: HDF5 reads a caching file object over its store (:mod:`.metadata`)."""

    latency_bound = True
    hdf5_reads_chunks = False   # (each of HDF5's reads would be a request: whole chunks are fetched concurrently)
    opens_collectively = False   # (each rank opens an object alone, by requests)

    def __init__(self, store: ByteStore, request: FileRequest) -> None:   # (HDF5 over the store, not by path)
        from .metadata import open_store_h5

        self.store = store
        self.driver = None   # (MPI-IO reads files: every rank fetches its own ranges of an object)
        #: True in the process that prepares the run (it caches the metadata for the next run)
        self.prepares = request.shipped is None
        self._metadata = (request.shipped or {}).get("metadata")   # (a worker's: what it was opened from)
        self.fh, self.file = open_store_h5(store, self.prepares, self._metadata, request.rdcc_nbytes)

    def state(self) -> dict:
        return self.store.state()

    def failure(self) -> Exception | None:
        from ..errors import ServerUnreachable
        from ..storage.retry import RemoteError

        failure = self.fh.failure
        return failure if isinstance(failure, RemoteError | ServerUnreachable) else None

    def fetch_ahead(self, datasets) -> None:
        """Start fetching what reading ``datasets`` will need, where no metadata was cached."""
        if self.prepares and self.fh.cached is None:
            from .metadata import fetch_ahead

            fetch_ahead(self.fh, datasets)

    def metadata(self, preload) -> list:
        """The HDF5 metadata read so far as ``(start, bytes)`` pieces (taken once, after ``preload()``); cached too."""
        if self._metadata is None:
            preload()
            self._metadata = self.fh.metadata()
            if self.prepares and self._metadata != self.fh.cached:
                from .metadata import cache_metadata

                cache_metadata(self.store, self._metadata)
        return self._metadata

    def keep_metadata(self) -> None:
        if self.prepares and self.fh.cached is None:
            from .metadata import cache_metadata

            cache_metadata(self.store, self.fh.metadata())

    def close(self) -> None:
        self.store.forget_ahead()
        super().close()


def open_file(location: Location, request: FileRequest) -> OpenedFile:
    """The H5MD file at ``location`` opened for reading (through ``request.store``, else its own); one-line errors."""
    shipped = request.shipped or {}
    store = request.store
    if store is None:
        store = location.store(shipped.get("identity"), shipped.get("round_trip"))
    try:
        return file_of(store, request)
    except BaseException:
        store.close()
        raise


def file_of(store: ByteStore, request: FileRequest) -> OpenedFile:
    """HDF5's view of the bytes in ``store``, which stays open when the open fails (its caller's)."""
    return (OpenedFile if store.c_openable_path is not None else RemoteFile)(store, request)
