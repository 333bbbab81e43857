"""A run's records: what it is asked to do (:class:`RunOptions`, with :class:`FollowOptions` for a
trajectory still being written) and what preparing it found (:class:`JobFacts`): one frozen record
each, read by name, instead of a chain of positional arguments and a dict keyed by strings."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import ConfigError
from .facts import LayoutFacts
from .planning import MAX_BLOCK_BYTES, plan_strided_tasks, plan_tasks

TYPE_CHECKING = False
if TYPE_CHECKING:
    import numpy as np

    from .analysis.base import FrameCost
    from .block import FrameRange
    from .endings import FollowOptions  # (a followed run's: defined there, importable from here)
    from .executors.base import Executor
    from .sources.base import Source


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How :func:`trajscale.run` runs a job: where its tasks run, which frames, how they are read.

    Every keyword of :func:`trajscale.run` other than ``on_update`` is a field here (its docstring
    says what each means); a keyword that is no field is an option of the executor (``scheduler=``
    for Dask, ``collective=`` for MPI), kept in ``executor_options``.

    Attributes
    ----------
    executor
        ``"serial"``, ``"processes"``, ``"dask"``, ``"mpi"``, ``"auto"`` or an Executor.
    n_workers
        Workers (processes, Dask workers); None: the executor's default.
    n_tasks
        Number of frame blocks; None: ``tasks_per_worker`` per worker.
    tasks_per_worker
        Tasks per worker when ``n_tasks`` is None; None: 4 (a followed run: 1 per round).
    start, stop, step
        Frames ``start, start + step, ...`` below ``stop``, as Python slices take them.
    progress
        Show a progress bar on stderr.
    group
        H5MD particle group to read.
    assume_units
        ``"nm"`` or ``"Angstrom"`` for H5MD datasets without a ``unit`` attribute.
    max_block_bytes
        Most bytes of frames a worker reads and maps at once.
    continuous
        Let trajectory parts that overlap in time join, the later part's frames kept.
    follow
        A :class:`FollowOptions` (True: the defaults): the trajectory is still being written, and its
        frames are analysed as they land; None (or False): a finished trajectory.
    executor_options
        Keyword options of the executor built by name (checked against its class when it is built).
    storage_options
        For a trajectory behind a URL (``s3://``, ``http(s)://``): fsspec's options (``anon``,
        ``endpoint_url``, ``key``/``secret``, ``client_kwargs``, ...) and trajscale's
        ``retry_seconds``/``timeout``/``max_concurrency``; never written into a report.
    """

    executor: str | Executor = "serial"
    n_workers: int | None = None
    n_tasks: int | None = None
    tasks_per_worker: int | None = None
    start: int | None = 0
    stop: int | None = None
    step: int = 1
    progress: bool = False
    group: str | None = None
    assume_units: str | None = None
    max_block_bytes: int = MAX_BLOCK_BYTES
    continuous: bool = False
    follow: FollowOptions | None = None
    executor_options: Mapping[str, object] = field(default_factory=dict)
    storage_options: Mapping[str, object] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.max_block_bytes < 1:
            raise ConfigError(f"max_block_bytes must be positive, got {self.max_block_bytes}")
        if self.n_tasks is not None and self.n_tasks < 1:
            raise ConfigError(f"the number of tasks must be at least 1 (got {self.n_tasks})")
        if self.tasks_per_worker is not None and self.tasks_per_worker < 1:
            raise ConfigError(f"tasks_per_worker must be at least 1 (got {self.tasks_per_worker})")
        if self.step < 1:
            raise ConfigError(f"step must be at least 1 (got {self.step})")
        # a copy: the caller's dict may change after the record is made
        object.__setattr__(self, "executor_options", dict(self.executor_options))
        if self.follow is False:
            object.__setattr__(self, "follow", None)
        elif self.follow is not None:   # (the options of a followed run only: imported for one)
            from .endings import FollowOptions

            if self.follow is True:
                object.__setattr__(self, "follow", FollowOptions())
            elif not isinstance(self.follow, FollowOptions):
                raise ConfigError(f"follow must be True or a trajscale.follow.FollowOptions, "
                                  f"got {type(self.follow).__name__}")

    @classmethod
    def from_keywords(cls, options: RunOptions | None = None, keywords: Mapping[str, object] = ()) -> RunOptions:
        """``options`` with ``keywords`` in place of its fields; other keywords are executor options."""
        if options is not None and not isinstance(options, RunOptions):
            raise ConfigError(f"options must be a trajscale.RunOptions, got {type(options).__name__}")
        base = options if options is not None else cls()
        keywords = dict(keywords)
        if not keywords:
            return base
        names = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in keywords.items() if k in names}
        extra = {k: v for k, v in keywords.items() if k not in names}
        merged = {**base.executor_options, **dict(given.pop("executor_options", None) or {}), **extra}
        return dataclasses.replace(base, **given, executor_options=merged)

    def tasks_for(self, ex: Executor, per_worker: int) -> int:
        """Tasks to cut the frames into: ``n_tasks``, else ``tasks_per_worker`` per worker; one on serial."""
        if self.n_tasks:
            return self.n_tasks
        one = ex.traits is not None and ex.traits.workers == "one"
        return 1 if one else ex.n_workers * (self.tasks_per_worker or per_worker)

    def make_executor(self, name: str | Executor | None = None) -> Executor:
        """The executor ``name`` (default: ``executor``) with ``n_workers`` and ``executor_options``; an option
        that neither this record nor the executor's class takes is refused, named, before anything starts."""
        from .executor_registry import executor_traits
        from .executors import make_executor, option_names
        from .executors.base import Executor

        name = self.executor if name is None else name
        given = sorted(self.executor_options)
        if isinstance(name, Executor):
            if given:
                raise ConfigError(f"{', '.join(map(repr, given))}: options of an executor built by name; "
                                  f"give them to the {type(name).__name__} passed as executor")
            return name
        takes = option_names(name)
        options = dict(self.executor_options)
        if name != self.executor and isinstance(self.executor, str) and executor_traits(self.executor).chooses:
            options = {k: v for k, v in options.items() if k in takes}   # auto's pick: its own options only
            given = sorted(options)
        unknown = [k for k in given if k not in takes]
        if unknown:
            fields = ", ".join(f.name for f in dataclasses.fields(self) if f.name != "executor_options")
            raise ConfigError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: "
                              f"trajscale.run takes {fields}, and executor {name!r} takes "
                              f"{', '.join(takes) or 'no options'}")
        return make_executor(name, self.n_workers, **options)


def _with_validator(source: Source) -> LayoutFacts:
    """The source's layout facts, with what its store would see of a replacement (the run report says it)."""
    facts, store = source.layout_summary(), source.store
    if store is None:
        return facts
    v = store.validator
    return dataclasses.replace(facts, validator=v.says, validator_complete=v.complete)


@dataclass(frozen=True, kw_only=True, eq=False)
class JobFacts:
    """What preparing a job found: the frames it analyses, what a frame costs to read, the file's layout.

    The task plan, ``executor="auto"``'s estimate and the run's report read it; under MPI rank 0
    prepares the job and broadcasts it with these facts.

    Attributes
    ----------
    start, stop, step
        The frames analysed: ``start, start + step, ...`` below ``stop``.
    n_atoms
        Atoms read per frame (the analysis's atoms, or all).
    frame_bytes
        Bytes one frame costs in the reader's buffers (:meth:`~trajscale.sources.base.Source.bytes_per_frame`).
    span_atoms
        Atoms from the first read to the last (a contiguous read covers them); None: ``n_atoms``.
    source_atoms
        Atoms per frame in the trajectory.
    chunk_frames
        Frames per storage chunk: tasks start on chunk boundaries.
    part_starts
        Frames where another file of the trajectory begins: task boundaries.
    decode_s_per_frame
        Seconds a frame costs to decode beyond reading its bytes (XTC decodes every atom).
    cost
        The analysis's declared work per frame (:meth:`~trajscale.analysis.base.Analysis.frame_cost`);
        None: linear in ``n_atoms``.
    reads_ahead
        The source fetches its bytes over a network, a block ahead (a file behind a URL).
    t_init_top
        Seconds spent reading the topology (and building a Universe, when one was needed).
    source
        The source's layout facts (:meth:`~trajscale.sources.base.Source.layout_summary`), for the report.
    topology
        The topology file, or None (a Universe given, or no topology).
    """

    start: int
    stop: int
    n_atoms: int
    frame_bytes: int
    step: int = 1
    span_atoms: int | None = None
    source_atoms: int | None = None
    chunk_frames: int = 1
    part_starts: tuple[int, ...] = ()
    decode_s_per_frame: float = 0.0
    cost: FrameCost | None = None
    reads_ahead: bool = False
    t_init_top: float = 0.0
    source: LayoutFacts = field(default_factory=LayoutFacts)
    topology: str | None = None

    @classmethod
    def of(cls, source: Source, atoms: np.ndarray | None, frame_bytes: int, frames: range, t_init_top: float,
           topology: object = None, cost: FrameCost | None = None) -> JobFacts:
        """The facts of a job reading ``atoms`` (None: all) of ``frames`` from ``source`` at ``cost`` per frame."""
        n_read = source.n_atoms if atoms is None else len(atoms)
        span = n_read if not n_read or atoms is None else int(atoms[-1] - atoms[0]) + 1
        return cls(start=frames.start, stop=frames.stop, step=frames.step, n_atoms=n_read, frame_bytes=frame_bytes,
                   span_atoms=span, source_atoms=source.n_atoms, chunk_frames=source.chunk_frames,
                   part_starts=source.part_starts, decode_s_per_frame=source.decode_seconds_per_frame(),
                   cost=cost, reads_ahead=source.reads_ahead, t_init_top=t_init_top, source=_with_validator(source),
                   topology=os.fspath(topology) if isinstance(topology, str | os.PathLike) else None)

    @property
    def n_frames(self) -> int:
        """Frames analysed."""
        return len(range(self.start, self.stop, self.step))

    def plan(self, n_tasks: int, n_workers: int, max_block_bytes: int) -> list[FrameRange]:
        """The frames cut into about ``n_tasks`` tasks of at most ``max_block_bytes`` each."""
        if self.step > 1:
            return plan_strided_tasks(self.start, self.stop, self.step, n_tasks, self.frame_bytes, n_workers,
                                      max_block_bytes, self.part_starts)
        return plan_tasks(self.start, self.stop, n_tasks, self.chunk_frames, self.frame_bytes, n_workers,
                          max_block_bytes, self.part_starts)


def __getattr__(name: str):
    if name == "FollowOptions":   # (defined with a followed run's endings: a run that follows nothing
        from .endings import FollowOptions  # does not create its class)

        return FollowOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FollowOptions", "JobFacts", "RunOptions"]
