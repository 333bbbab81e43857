"""The Source interface: hands out Blocks of frames for a frame range and atom subset."""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from ..block import FIELD_ATTRS, Block
from ..errors import FrameRangeError, InputFileError
from ..facts import LayoutFacts
from ..formats import FormatTraits
from ..storage.location import Location

#: Box (6 float32), time (float64) and step (int64) of one frame.
FRAME_META_BYTES = 40


@contextmanager
def store_for(path: str, store=None):
    """``store`` (the registry's), else the file's own, opened here and closed when the block ends."""
    if store is not None:
        yield store
        return
    own = Location(path).store()
    try:
        yield own
    finally:
        own.close()


def file_head(path: str, n: int, store=None) -> bytes:
    """The first ``n`` bytes of a file (fewer if shorter; none for a folder or unreadable file), from ``store``."""
    try:
        with store_for(path, store) as bytes_of:
            return bytes_of.first_bytes(n)
    except (InputFileError, OSError):
        return b""


@dataclass(frozen=True, eq=False)
class OpenRequest:
    """What a caller asks of the Source the format registry opens for one file.

    A Source uses the fields that apply to its format; the registry refuses ``group`` and ``assume_units`` for
    a Source that does not declare :attr:`Source.takes_h5md_options`."""

    #: Topology file (a Source whose format lacks atom data may need it; None: none given).
    topology: str | None = None
    #: H5MD: HDF5 driver (``"mpio"``), its communicator and collective reads.
    driver: str | None = None
    comm: object = None
    collective: bool = False
    #: H5MD (and segments of it): particle group and the units of datasets without a unit attribute.
    group: str | None = None
    assume_units: str | None = None
    #: XTC/TRR: a cut-short last frame refused (True) or left out with a warning (False; None: the process's).
    strict: bool | None = None
    #: Atoms per frame the caller expects (a segment index's): a file with others is refused.
    n_atoms: int | None = None
    #: Frame offsets scanned by the process that prepared the job (:attr:`Source.ships_offsets`).
    offsets: str | None = None
    #: The format's name when the caller knows it (a segment index records it): not guessed again.
    format: str | None = None
    #: A part behind a URL: what the preparing process looked up of it (:meth:`~.h5md.H5MDSource.remote_state`),
    #: so that a worker opens and reads it without walking its metadata over the network.
    shipped: dict | None = None
    #: The file's bytes, opened already by the registry: the Source reads through it and closes it. Never shipped.
    store: object = None


class Trait:
    """A Source's declared trait, read from its kind's record (:attr:`Source.traits`), of the class or an instance."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner: type):
        return getattr(owner.traits, self.name)


class Source(ABC):
    """A trajectory that hands out :class:`~trajscale.block.Block` objects.

    A Source travels to workers and ranks as ``get_config()`` (plain values) and is reopened there with
    :func:`trajscale.sources.source_from_config`; open file handles never cross a process boundary. Its kind's
    record (:attr:`traits`) declares the formats it reads and what it can do; :mod:`trajscale.sources.registry`
    asks :meth:`guess_format` (the file's own bytes) and opens with :meth:`open`."""

    #: The kind's declared traits (:class:`~trajscale.formats.FormatTraits`): every attribute below that reads
    #: it is the record's, restated nowhere. A plug-in's Source may set them as class attributes instead.
    traits: FormatTraits = FormatTraits(kind="", source="")
    kind: str = Trait()
    formats: tuple[str, ...] = Trait()
    suffixes: Mapping[str, str] = Trait()
    description: str = Trait()
    supports_mpio: bool = Trait()
    supports_parts: bool = Trait()
    supports_following: bool = Trait()
    snapshots: str = Trait()
    grows_by_appending: bool = Trait()
    lists_parts: bool = Trait()
    decode_s_per_atom: Mapping[str, float] = Trait()
    decoding: Mapping[str, str] = Trait()
    supports_slab_reads: bool = Trait()
    ships_offsets: bool = Trait()
    replaced_each_round: bool = Trait()
    takes_h5md_options: bool = Trait()
    stores_atom_labels: bool = Trait()
    reads_urls: bool = Trait()
    reads_given_store: bool = Trait()
    worker_modules: tuple[str, ...] = Trait()
    fills_rows: bool = Trait()
    shares_file_store: bool = Trait()
    kept_on_node: bool = Trait()
    #: When True, a Block's per-atom arrays may live in a buffer the next ``read`` overwrites (worker-side
    #: sources: a fresh 100 MB array's page faults halve the read bandwidth; ``Analysis.map`` keeps no views).
    reuse_buffers: bool = False

    @classmethod
    def shared_file(cls, store, path: str, described_here: bool):
        """The file's members through ``store``: ``member(config, layout)`` (None: described anew), ``close()``."""
        raise NotImplementedError(f"{cls.__name__} reads one trajectory per file")

    @classmethod
    def member_layout(cls, config: dict):
        """Where a member's data lie, parsed once from its config; None for one trajectory per file."""
        return None

    @classmethod
    def member_bytes(cls, config: dict) -> int:
        """The bytes of the member's positions, from its config alone (no I/O; 0: not said); ensembles weigh by them."""
        return 0

    @classmethod
    def node_copy_config(cls, config: dict, copy_path: str) -> dict | None:
        """``config`` (a file behind a URL) pointed at the node's copy at ``copy_path``; None: read from the URL."""
        return None

    @classmethod
    def guess_format(cls, path: str, store=None) -> str | None:
        """The name of the format ``path`` is in, told by its own first bytes (``store``: the registry's), or None."""
        return None

    @classmethod
    def decoding_of(cls, fmt: str) -> str | None:
        """Who decodes a frame of format ``fmt`` beyond the selected atoms, and how far (:attr:`decoding`)."""
        return cls.decoding.get(str(fmt).upper(), cls.decoding.get("*"))

    @classmethod
    def layout_report(cls, path: str, request: OpenRequest) -> dict | None:
        """The format's own report of how ``path`` stores its frames (``inspect``), as plain values; None: none."""
        return None

    @classmethod
    def guess_can_open(cls, path: str) -> bool:
        """True when the file's own bytes say this Source reads it (xarray's ``guess_can_open``)."""
        return cls.guess_format(path) is not None

    @classmethod
    def open(cls, location: Location, request: OpenRequest) -> Source:
        """Open ``location`` as the registry asks (``request.store``, if any, is its bytes: read through it)."""
        raise NotImplementedError(f"{cls.__name__} is not opened from a file by the format registry")

    @property
    def format(self) -> str:
        """The name of the format read (one of :attr:`formats`; the kind for a Source of none)."""
        return self.formats[0] if self.formats else self.kind

    @property
    def native_units(self) -> dict[str, str]:
        """The units the file stores, by MDAnalysis quantity (``{"length": "nm", ...}``); empty: not declared."""
        return {}

    def stored_units(self) -> dict[str, str | None]:
        """Per quantity, the unit the file stores (H5MD's strings; None: undeclared): ``convert --units source``."""
        from ..units import MDANALYSIS_QUANTITY, from_mdanalysis

        native = self.native_units
        return {q: from_mdanalysis(q, native.get(MDANALYSIS_QUANTITY[q])) for q in MDANALYSIS_QUANTITY}

    @property
    def particle_group(self) -> str | None:
        """The particle group the frames are read from (H5MD's ``particles/NAME``); None for one set of atoms."""
        return None

    def observables(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Per-frame quantities beside the frames (H5MD's ``observables``): shape and dtype of one frame's value."""
        return {}

    def read_observables(self, names, start: int, stop: int) -> dict[str, np.ndarray]:
        """Frames ``[start, stop)`` of each of :meth:`observables` ``names`` (none for a source that keeps none)."""
        return {}

    def stored_atom_labels(self) -> dict[str, np.ndarray]:
        """Per-atom labels stored beside the frames (``name``, ``resname``, ``resid``, ``segid``, ``mass``), if any."""
        return {}

    def frame_times(self) -> tuple[np.ndarray, np.ndarray]:
        """Every frame's time (ps, float64) and step (int64), for ``trajscale inspect``."""
        n, one = self.n_frames, np.array([0])
        times, steps = np.empty(n), np.empty(n, np.int64)
        for a in range(0, n, 4096):
            b = self.read(a, min(n, a + 4096), one)
            times[a:a + b.n_frames], steps[a:a + b.n_frames] = b.time, b.step
        return times, steps

    def remote_stats(self) -> dict | None:
        """Network cost so far: ``requests``, ``bytes``, ``wait_s`` and ``retries``; None for local files."""
        return None

    @property
    def store(self):
        """The one :class:`~trajscale.storage.ByteStore` the frames are read from; None if several or not ours."""
        return None

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
        """Frames at which another file of the trajectory begins (past frame 0), in order: tasks begin there."""
        return ()

    @property
    def fields(self) -> tuple[str, ...]:
        """Per-atom fields available: a subset of position, velocity, force."""
        return ("position",)

    @abstractmethod
    def read(self, start: int, stop: int, atoms: np.ndarray | None = None,
             fields: tuple[str, ...] = ("position",), stride: int = 1) -> Block:
        """Frames ``start:stop:stride`` for ``atoms`` (all atoms if None); skipped frames are not read."""

    @property
    def reads_ahead(self) -> bool:
        """True where :meth:`prefetch` fetches ahead (bytes behind a URL)."""
        return False

    def prefetch(self, start: int, stop: int, atoms: np.ndarray | None = None,   # noqa: B027 - optional
                 fields: tuple[str, ...] = ("position",), stride: int = 1) -> None:
        """A hint: the next :meth:`read` will be this one (a URL's bytes are fetched meanwhile)."""

    def _read_rows(self, start: int, stop: int, atoms: np.ndarray | None = None,
                   fields: tuple[str, ...] = ("position",), stride: int = 1) -> Block:
        """``read`` of a Source that fills rows (it sets ``read = _read_rows``); box zeros where a frame has none."""
        self.check_range(start, stop)
        self.check_request(atoms, fields)
        n = len(range(start, stop, stride))
        n_sel = self.n_atoms if atoms is None else len(atoms)
        out = {fl: self._out_array(fl, (n, n_sel, 3)) for fl in fields}
        box, time, step = np.zeros((n, 6), np.float32), np.empty(n), np.empty(n, np.int64)
        self.read_into(start, stop, atoms, stride, out, box, time, step)
        return Block(start, stop, out["position"], box, time, step,
                     velocities=out.get("velocity"), forces=out.get("force"), stride=stride)

    def read_into(self, start: int, stop: int, atoms: np.ndarray | None, stride: int,
                  out: dict[str, np.ndarray], box: np.ndarray, time: np.ndarray, step: np.ndarray) -> None:
        """Frames ``start:stop:stride`` into preallocated rows (``out[field]``, ``box``, ``time``, ``step``)."""
        blk = self.read(start, stop, atoms, tuple(out), stride=stride)
        for fl, arr in out.items():
            arr[:] = getattr(blk, FIELD_ATTRS[fl])
        box[:], time[:], step[:] = blk.box, blk.time, blk.step

    def read_frames_into(self, frames: np.ndarray, out: dict[str, np.ndarray], time: np.ndarray) -> bool:
        """Every atom of the sorted ``frames`` into ``out[field]`` and ``time`` at once; False: read by runs."""
        return False

    def frame_header(self, frame: int) -> tuple[int, float, np.ndarray]:
        """One frame's step, time (ps) and box, (1, 6) as its Block holds it (no more read where a format allows)."""
        b = self.read(frame, frame + 1, np.array([0]))
        return int(b.step[0]), float(b.time[0]), b.box

    def bytes_per_frame(self, atoms: np.ndarray | None = None,
                        fields: tuple[str, ...] = ("position",)) -> int:
        """Bytes one frame costs in the arrays ``read`` allocates (what sizes blocks and tasks)."""
        n_sel = self.n_atoms if atoms is None else len(atoms)
        return n_sel * 12 * len(fields) + FRAME_META_BYTES

    #: Why this file's frames end early (damage after whole frames), or None: ``plan_join`` refuses a hole.
    damaged: str | None = None

    #: Bytes read from storage so far, for reports (0 for a source that does not count them).
    bytes_read: int = 0
    #: Files opened so far, and their paths in order (segments); ``opened`` None for a source of one file.
    opens: int = 0
    opened: list[str] | None = None

    @property
    def collective(self) -> bool:
        """True when this source's reads are collective MPI-IO calls."""
        return False

    def preload_frame_meta(self, start: int, stop: int) -> None:   # noqa: B027 - optional
        """Read box, time and step of frames ``[start, stop)`` ahead, for a worker about to read that span."""

    def frames_universe(self):
        """The MDAnalysis Universe whose trajectory this Source reads (the run's topology, never parsed again)."""
        return None

    def own_universe(self):
        """The topology this Source carries with its frames, as a Universe; None: a topology file describes them."""
        return self.frames_universe()

    def decode_seconds_per_frame(self) -> float:
        """Seconds one frame costs to decode beyond reading its bytes (``executor="auto"``'s estimate)."""
        return 0.0

    @abstractmethod
    def get_config(self) -> dict:
        """Plain-value config from which the source can be reopened elsewhere."""

    def layout_summary(self) -> LayoutFacts:
        """Storage facts for reports (format, chunks, compression)."""
        return LayoutFacts(format=self.kind, path=self.path)

    def refresh(self) -> None:   # noqa: B027 - optional; the default checks nothing
        """Called before a kept source serves another task: one that opens files lazily checks they are unchanged."""

    def close(self) -> None:   # noqa: B027 - optional; a source may hold no handle
        """Release file handles."""

    def _out_array(self, field: str, shape: tuple[int, ...]) -> np.ndarray:
        """An uninitialised float32 array for ``field``: a reused buffer if ``reuse_buffers``."""
        if not self.reuse_buffers:
            return np.empty(shape, np.float32)
        size = math.prod(shape)
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
        missing = [fl for fl in fields if fl not in self.fields]
        if missing:
            raise InputFileError(self.path, f"has no {', '.join(missing)} data")
        if atoms is not None and len(atoms) and (np.min(atoms) < 0 or np.max(atoms) >= self.n_atoms):
            raise InputFileError(self.path, f"atom index out of range for {self.n_atoms} atoms")

    def check_range(self, start: int, stop: int) -> None:
        if not 0 <= start <= stop <= self.n_frames:
            raise FrameRangeError(
                f"{self.path}: frames [{start}, {stop}) outside the trajectory's {self.n_frames} frames")


class OneFileSource(Source):
    """A Source of one file: the subclass sets ``_path``, ``_format``, ``_n_frames``, ``_n_atoms``, ``_fields``."""

    _path: str
    _format: str
    _n_frames: int
    _n_atoms: int
    _fields: tuple[str, ...]

    format = property(attrgetter("_format"))
    path = property(attrgetter("_path"))
    n_frames = property(attrgetter("_n_frames"))
    n_atoms = property(attrgetter("_n_atoms"))
    fields = property(attrgetter("_fields"))

    def layout_summary(self) -> LayoutFacts:
        return LayoutFacts(format=self._format, path=self._path, n_atoms=self._n_atoms,
                           decoding=self.decoding_of(self._format))

    def decode_seconds_per_frame(self) -> float:
        return self.decode_s_per_atom.get(self._format, 0.0) * self._n_atoms
