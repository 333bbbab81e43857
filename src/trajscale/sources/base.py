"""The Source interface: hands out Blocks of frames for a frame range and atom subset."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod

import numpy as np

from ..block import FIELD_ATTRS, Block
from ..facts import LayoutFacts

#: Box (6 float32), time (float64) and step (int64) of one frame.
FRAME_META_BYTES = 40
#: Seconds per atom to decode one frame, by format: XTC's compressed coordinates cost CPU time
#: (measured in docs/benchmarks.md); other formats are plain floats, costed by their bytes.
DECODE_S_PER_ATOM = {"XTC": 8.5e-8}


class Source(ABC):
    """A trajectory that hands out :class:`~trajscale.block.Block` objects.

    A Source travels to workers and ranks as ``get_config()`` (a small dict of
    plain values) and is reopened there with
    :func:`trajscale.sources.source_from_config`; open file handles never cross
    a process boundary.
    """

    kind: str = ""
    #: True when the source can open its file with HDF5's MPI-IO driver.
    supports_mpio: bool = False
    #: When True, a Block's per-atom arrays may live in a buffer that the next
    #: ``read`` overwrites. The task wrapper turns this on for its worker-side
    #: sources: a fresh 100 MB array costs page faults that halve the read
    #: bandwidth, and ``Analysis.map`` keeps no views of its block.
    reuse_buffers: bool = False

    @property
    @abstractmethod
    def path(self) -> str:
        """The file (or first file) behind the source, for messages and reports."""

    @property
    @abstractmethod
    def n_frames(self) -> int: ...

    @property
    @abstractmethod
    def n_atoms(self) -> int: ...

    @property
    def chunk_frames(self) -> int:
        """Frames per storage chunk; task boundaries are aligned to it."""
        return 1

    @property
    def part_starts(self) -> tuple[int, ...]:
        """Frames at which another file of the trajectory begins (past frame 0), in order.

        Tasks begin there, so a task reads one file (or whole files): empty for
        a trajectory in one file, the segment starts for a segmented one.
        """
        return ()

    @property
    def fields(self) -> tuple[str, ...]:
        """Per-atom fields available: a subset of position, velocity, force."""
        return ("position",)

    @abstractmethod
    def read(self, start: int, stop: int, atoms: np.ndarray | None = None,
             fields: tuple[str, ...] = ("position",), stride: int = 1) -> Block:
        """Frames ``start:stop:stride`` for ``atoms`` (all atoms if None); skipped frames are not read."""

    def read_into(self, start: int, stop: int, atoms: np.ndarray | None, stride: int,
                  out: dict[str, np.ndarray], box: np.ndarray, time: np.ndarray, step: np.ndarray) -> None:
        """Frames ``start:stop:stride`` into preallocated rows: ``out[field]``, ``box``, ``time``, ``step``.

        For a source stitching others together (segments); this default reads a
        Block and copies it, sources that can fill the rows directly override it.
        """
        blk = self.read(start, stop, atoms, tuple(out), stride=stride)
        for fl, arr in out.items():
            arr[:] = getattr(blk, FIELD_ATTRS[fl])
        box[:], time[:], step[:] = blk.box, blk.time, blk.step

    def step_time(self, frame: int) -> tuple[int, float]:
        """Step and time (ps) of one frame (joining parts reads a few per file: ``chain.plan_join``)."""
        b = self.read(frame, frame + 1, np.array([0]))
        return int(b.step[0]), float(b.time[0])

    def bytes_per_frame(self, atoms: np.ndarray | None = None,
                        fields: tuple[str, ...] = ("position",)) -> int:
        """Bytes one frame costs in the arrays ``read`` allocates (what sizes blocks and tasks).

        The default: the selected atoms' float32 xyz per field, plus box, time and step.
        """
        n_sel = self.n_atoms if atoms is None else len(atoms)
        return n_sel * 12 * len(fields) + FRAME_META_BYTES

    #: Bytes read from storage so far, for reports (0 for a source that does not count them).
    bytes_read: int = 0
    #: Files opened so far, and their paths in order, for a source that opens files lazily
    #: (segments); ``opened`` is None for a source of one file opened when it is made.
    opens: int = 0
    opened: list[str] | None = None

    @property
    def collective(self) -> bool:
        """True when this source's reads are collective MPI-IO calls."""
        return False

    def preload_frame_meta(self, start: int, stop: int) -> None:   # noqa: B027 - optional
        """Read box, time and step of frames ``[start, stop)`` ahead, in one call per field, for a
        worker about to read that span; the default reads them with each block."""

    def decode_seconds_per_frame(self) -> float:
        """Seconds one frame costs to decode beyond reading its bytes (compressed formats such as
        XTC decode every atom of a frame, whatever is selected): for ``executor="auto"``'s estimate."""
        return 0.0

    @abstractmethod
    def get_config(self) -> dict:
        """Plain-value config from which the source can be reopened elsewhere."""

    def layout_summary(self) -> LayoutFacts:
        """Storage facts for reports (format, chunks, compression)."""
        return LayoutFacts(format=self.kind, path=self.path)

    def refresh(self) -> None:   # noqa: B027 - optional; the default checks nothing
        """Called before a source kept open by a worker serves another task.

        A source that opens files lazily (segments) checks, from then on, that
        each file it holds open is still the one it opened; the default does
        nothing (the worker's cache checks the files a config names).
        """

    def close(self) -> None:   # noqa: B027 - optional; a source may hold no handle
        """Release file handles."""

    def _out_array(self, field: str, shape: tuple[int, ...]) -> np.ndarray:
        """An uninitialised float32 array for ``field``: a reused buffer if ``reuse_buffers``."""
        if not self.reuse_buffers:
            return np.empty(shape, np.float32)
        size = int(np.prod(shape))
        scratch = getattr(self, "_scratch", None)
        if scratch is None:
            scratch = self._scratch = {}
        key = (threading.get_ident(), field)   # a Dask worker may run tasks in several threads
        buf = scratch.get(key)
        if buf is None or buf.size < size:
            buf = scratch[key] = np.empty(size, np.float32)
        return buf[:size].reshape(shape)

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check_request(self, atoms: np.ndarray | None, fields: tuple[str, ...]) -> None:
        """Raise a clear error for atom indices outside the trajectory or fields it lacks."""
        from ..errors import InputFileError

        missing = [fl for fl in fields if fl not in self.fields]
        if missing:
            raise InputFileError(self.path, f"has no {', '.join(missing)} data")
        if atoms is not None and len(atoms) and (np.min(atoms) < 0 or np.max(atoms) >= self.n_atoms):
            raise InputFileError(self.path, f"atom index out of range for {self.n_atoms} atoms")

    def check_range(self, start: int, stop: int) -> None:
        from ..errors import FrameRangeError

        if not 0 <= start <= stop <= self.n_frames:
            raise FrameRangeError(
                f"{self.path}: frames [{start}, {stop}) outside the trajectory's {self.n_frames} frames")
