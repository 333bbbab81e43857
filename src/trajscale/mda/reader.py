"""An MDAnalysis trajectory reader over trajscale's Sources: format ``"TRAJSCALE"``.

A list given with this format is read by this reader, not MDAnalysis's ChainReader: restart parts are joined as
``gmx trjcat`` joins them. Iteration reads blocks of frames, a thread reading the next while the current one is
served, so memory stays at two blocks. Values are in MDAnalysis's base units whatever the file stores.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from MDAnalysis.coordinates.base import ReaderBase
from MDAnalysis.coordinates.chain import ChainReader as _MDAChainReader
from MDAnalysis.lib.util import store_init_arguments

from ..block import Block
from ..errors import TrajscaleError
from ..storage.location import Location
from ..util import file_identity

log = logging.getLogger(__name__)

#: An empty file is read as empty, unless its header claims more atoms than any simulated system has.
MAX_ATOMS_WITHOUT_FRAMES = 10**8

#: Bytes of frames read at once while iterating (two such blocks live at a time).
BLOCK_BYTES = 32 * 1024**2


def _paths(filename) -> list[str]:
    if isinstance(filename, (list, tuple)):
        return [os.fspath(p) for p in filename]
    return [os.fspath(filename)]


class Reader(ReaderBase):
    """MDAnalysis reader for every trajectory trajscale reads (see the module's docstring).

    Parameters
    ----------
    filename
        An H5MD file, a segment index (``.json``) or folder, or a list of XTC/TRR/DCD parts.
    group
        The H5MD particle group, when the file has several.
    topology
        A topology file, needed only by parts that MDAnalysis must decode (DCD chains).
    assume_units
        ``"nm"`` or ``"Angstrom"`` for H5MD datasets without a unit attribute.
    continuous
        Overlapping parts join with the later part's frames kept, as ``ChainReader(continuous=True)`` joins
        them; without it they are refused. Restart parts join either way.
    comm
        An MPI communicator: H5MD files are opened with MPI-IO (``driver="mpio"``).
    block_bytes
        Bytes of frames read at once while iterating.
    follow
        The file is still being written: only whole frames are read, and iterating waits for new frames until
        the writer marks it complete or none comes for ``idle`` seconds. ``len()`` is the frames known so far.
    idle, poll
        With ``follow``: seconds without a new frame that end the iteration; seconds between looks.
    storage_options
        For files behind URLs: their options (docs/remote.md), over the process's own.
    """

    format = "TRAJSCALE"
    units = {"time": "ps", "length": "Angstrom", "velocity": "Angstrom/ps", "force": "kJ/(mol*Angstrom)"}

    @store_init_arguments
    def __init__(self, filename, convert_units=True, group: str | None = None, topology=None,
                 assume_units: str | None = None, comm=None, block_bytes: int = BLOCK_BYTES,
                 continuous: bool = False, follow: bool = False, idle: float = 60.0, poll: float = 0.5,
                 storage_options: dict | None = None, **kwargs):
        super().__init__(filename, convert_units=convert_units, **kwargs)
        self._follow = (float(idle), float(poll)) if follow else None
        self._files = _paths(filename)
        self.filename = self._files[0] if len(self._files) == 1 else self._files
        self._options = {"group": group, "topology": None if topology is None else os.fspath(topology),
                         "assume_units": assume_units, "continuous": bool(continuous)}
        self._where = Location.each(self._files, storage_options)
        self._comm = comm
        self._block_bytes = max(1, int(block_bytes))
        self._pool: ThreadPoolExecutor | None = None
        #: Held by every use of the source: the read-ahead and main threads share one handle.
        self._lock = threading.Lock()
        self._open()
        fields = self._source.fields
        self.n_atoms = self._source.n_atoms
        self.ts = self._Timestep(self.n_atoms, positions="position" in fields, velocities="velocity" in fields,
                                 forces="force" in fields, reader=self, **self._ts_kwargs)
        if self._n_frames:
            self._read_frame(0)
        else:   # an empty file (a writer that failed before its first frame): 0 frames, iteration yields none
            self.ts.frame = -1

    # ------------------------------------------------------------------ files
    def _open(self) -> None:
        from ..sources import open_source

        opts = self._options
        if getattr(self, "_follow", None) is not None:
            self._open_growing()
            return
        try:
            self._source = open_source(self._where if len(self._where) > 1 else self._where[0],
                                       opts["topology"], group=opts["group"], assume_units=opts["assume_units"],
                                       comm=self._comm, driver="mpio" if self._comm is not None else None,
                                       continuous=opts["continuous"])
        except TrajscaleError as exc:
            raise IOError(str(exc)) from None
        if "position" not in self._source.fields:
            self._source.close()
            raise IOError(f"{self._files[0]}: no positions to read")
        if not self._source.n_frames and self._source.n_atoms > MAX_ATOMS_WITHOUT_FRAMES:
            # no stored frame vouches for the header's atom count, and a Timestep of it is allocated now
            self._source.close()
            raise IOError(f"{self._files[0]}: no frames to read, and its header claims "
                          f"{self._source.n_atoms:,} atoms")
        self._identity = file_identity(self._files)
        self._n_frames = self._source.n_frames
        self._block: Block | None = None
        self._pending: tuple[tuple[int, int, int], Future] | None = None
        self._frame = -1
        self._step = 1

    def _open_growing(self) -> None:
        """Open the frames of a file being written that are whole now (waiting ``idle`` s for the first)."""
        from ..sources.follow import first_snapshot

        if len(self._files) != 1:
            raise OSError("follow reads one growing trajectory, not a list of parts")
        idle, poll = self._follow
        opts = self._options
        try:
            snap = first_snapshot(self._files[0], opts["topology"], group=opts["group"],
                                  assume_units=opts["assume_units"], wait=idle, poll=poll)
        except TrajscaleError as exc:
            raise OSError(str(exc)) from None
        self._adopt(snap)
        self._block, self._pending, self._frame, self._step = None, None, -1, 1

    def _adopt(self, snap) -> None:
        snap.warn_torn_end()   # finished: no later snapshot is taken, so it is said once
        self._source, self._n_frames, self._finished = snap.source, snap.n_frames, snap.finished
        self._identity = file_identity(self._files)
        self._grew_at = time.monotonic()

    def _wait_for(self, frame: int) -> None:
        """Return once ``frame`` is whole in the growing file; EOFError when complete or idle (iteration stops)."""
        from ..sources.follow import snapshot

        idle, poll = self._follow
        opts = self._options
        while frame >= self._n_frames:
            if self._finished or time.monotonic() - self._grew_at >= idle:
                raise EOFError(f"{self._files[0]}: {self._n_frames} frames; "
                               f"{'complete' if self._finished else f'no new frame for {idle:g} s'}")
            time.sleep(poll)
            # HDF5 shares one open file per process: the old handle goes first, or the new open sees its past
            self._drop_pending()
            self._block = None
            if self._source is not None:
                self._source.close()
                self._source = None
            try:
                snap = snapshot(self._files[0], opts["topology"], group=opts["group"],
                                assume_units=opts["assume_units"])
            except TrajscaleError:   # caught mid-flush: look again
                continue
            grew_at, n = self._grew_at, self._n_frames
            self._adopt(snap)
            if snap.n_frames <= n:
                self._grew_at = grew_at

    def _fresh(self) -> None:
        """Reopen a file rewritten since it was opened: frames are never served stale (one stat per file and read)."""
        if self._follow is not None:   # it grows by design; _wait_for takes the new frames
            return
        if file_identity(self._files) != self._identity:
            log.debug("%s changed since it was opened: reopening", self._files[0])
            self._drop_pending()
            self._source.close()
            self._open()

    @property
    def n_frames(self) -> int:
        return self._n_frames

    def _get_dt(self) -> float:
        """Time between the first two frames (ps), read from the file's time data."""
        if self._n_frames < 2:
            return 0.0
        with self._lock:
            t = self._source.read(0, 2, np.array([0])).time
        return float(t[1] - t[0])

    @property
    def has_velocities(self) -> bool:
        with self._lock:
            return "velocity" in self._source.fields

    @property
    def has_forces(self) -> bool:
        with self._lock:
            return "force" in self._source.fields

    # ------------------------------------------------------------------ frames
    def _frames_per_block(self) -> int:
        with self._lock:
            return max(1, self._block_bytes // max(1, self._source.bytes_per_frame(None, self._source.fields)))

    def _read(self, start: int, stop: int, stride: int) -> Block:
        with self._lock:
            return self._source.read(start, stop, None, self._source.fields, stride=stride)

    def _block_at(self, frame: int, stride: int, n: int) -> tuple[int, int, int]:
        return frame, min(self.n_frames, frame + n * stride), stride

    def _drop_pending(self) -> None:
        if getattr(self, "_pending", None) is not None:   # (a reader whose open failed has none)
            self._pending[1].cancel()
            with contextlib.suppress(Exception):   # a read-ahead nobody will use
                self._pending[1].result()
            self._pending = None

    def _load(self, frame: int) -> Block:
        """The block holding ``frame``: read now, or taken from the read-ahead."""
        step = frame - self._frame if self._frame >= 0 else 0
        # walking forward (next(), a slice, sorted indices) by the step of the last move: read ahead
        forward = step == 1 or 0 < step == self._step
        self._step = step
        if forward and self._pending is not None and self._pending[0][0] == frame and self._pending[0][2] == step:
            block = self._pending[1].result()
            self._pending = None
        else:
            self._drop_pending()
            self._fresh()
            # a jump reads one frame; a walk reads a block of the frames it will visit
            n = self._frames_per_block() if forward else 1
            block = self._read(*self._block_at(frame, step if forward else 1, n))
        if forward and block.stop < self.n_frames:   # read the next block while this one is served
            nxt = self._block_at(block.start + block.n_frames * block.stride, block.stride, self._frames_per_block())
            if nxt[0] < self.n_frames:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(1, thread_name_prefix="trajscale-readahead")
                self._pending = (nxt, self._pool.submit(self._read, *nxt))
        return block

    def _read_frame(self, frame: int):
        if not 0 <= frame < self.n_frames:
            raise EOFError(f"{self._files[0]}: frame {frame} outside its {self.n_frames} frames")
        if self._source is None:   # closed: reopen, as MDAnalysis's readers do
            self._open()
        elif frame != self._frame + self._step:   # not the next frame of a walk: check the file first
            self._fresh()
        b = self._block
        if b is None or not (b.start <= frame < b.stop and (frame - b.start) % b.stride == 0):
            b = self._block = self._load(frame)
        k = (frame - b.start) // b.stride
        ts = self.ts
        ts.frame = frame
        ts.positions[:] = b.positions[k]
        if b.velocities is not None:
            ts.velocities[:] = b.velocities[k]
        if b.forces is not None:
            ts.forces[:] = b.forces[k]
        box = b.box[k]
        ts.dimensions = box.copy() if box[:3].any() else None   # a copy: users change ts.dimensions in place
        ts.time = float(b.time[k])
        ts.data["step"] = int(b.step[k])
        self._frame = frame
        return ts

    def _read_next_timestep(self, ts=None):
        if self._follow is not None and self._frame + 1 >= self._n_frames:
            self._wait_for(self._frame + 1)
        return self._read_frame(self._frame + 1)

    def rewind(self):
        """Position at the first frame; an empty trajectory has none (MDAnalysis's ``rewind`` would read it)."""
        if self._n_frames:
            return super().rewind()
        self._reopen()

    def _reopen(self) -> None:
        if self._source is None:
            self._open()
        self._frame = -1

    def close(self) -> None:
        self._drop_pending()
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        source = self.__dict__.get("_source")
        if source is not None:
            source.close()
            self._source = None
            self._block = None

    def Writer(self, filename, n_atoms=None, **kwargs):
        """A :class:`trajscale.mda.Writer` (format ``TRAJSCALE``) with this trajectory's fields."""
        from .writer import Writer

        kwargs.setdefault("velocities", self.has_velocities)
        kwargs.setdefault("forces", self.has_forces)
        return Writer(filename, self.n_atoms if n_atoms is None else n_atoms, **kwargs)

    # ------------------------------------------------------------------ pickling
    def __getstate__(self):
        """How to reopen the file, and the current Timestep: never an open handle or a communicator."""
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_source", "_block", "_pending", "_pool", "_comm", "_identity", "_lock")}
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._comm, self._pool, self._lock = None, None, threading.Lock()
        ts, frame = self.ts, state.get("_frame", -1)
        self._open()
        self._frame = frame
        self.ts = ts


class ChainReader(_MDAChainReader):
    """MDAnalysis's ChainReader, registered in its place (MDAnalysis hands it every list), except for a list
    given with format ``"TRAJSCALE"``: that is trajscale's :class:`Reader`."""

    format = "CHAIN"

    def __new__(cls, filenames=None, *args, **kwargs):
        fmt = kwargs.get("format")
        if isinstance(fmt, str) and fmt.upper() == Reader.format:
            kwargs.pop("format")
            return Reader(filenames, *args, **kwargs)
        return super().__new__(cls)
