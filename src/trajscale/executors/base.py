"""The Executor interface and the task wrapper every executor runs.

An executor decides only *where* ``Analysis.map`` runs and how partials come home.  What runs is
always :func:`run_task`, timing each phase, so every executor fills the RunReport the same way."""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from ..analysis.base import Analysis, Prepared, analysis_from_config, check_boxes
from ..block import FrameRange
from ..errors import ConfigError, InputFileError, TaskError, TrajscaleError
from ..executor_registry import EXECUTORS, ExecutorTraits
from ..parallel import check_not_launched
from ..report.timing import TaskTiming, host_and_pid
from ..sources import Source, source_from_config
from ..sources.opened import BUDGET, OpenSources
from ..storage import hide_in_logs, redacted
from ..timeline import cpu_facts, mark_ready, process_start
from ..util import file_identity, raise_if_stopped, slow_phase_for_tests, stop_requested

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class Job:
    """Everything a worker needs, as plain values: travels by pickle or MPI broadcast.

    ``block_frames`` bounds the frames read and mapped at once inside a task, so a
    worker's memory does not grow with the size of its task.
    """

    analysis: dict
    source: dict
    prepared: Prepared
    block_frames: int = 2**62
    #: Analyse every ``stride``-th frame; task ranges start on a kept frame (``run(step=)``).
    stride: int = 1
    #: The trajectory is still being written (a followed run's round): its file may be opened mid-flush.
    growing: bool = False
    #: The source fetches a block ahead (:attr:`~trajscale.sources.base.Source.reads_ahead`);
    #: a pool's workers then take their tasks themselves (:func:`~.claims.hand_out`).
    reads_ahead: bool = False

    def __repr__(self) -> str:   # the source's storage options may hold credentials
        return (f"Job(analysis={self.analysis!r}, source={redacted(self.source)!r}, prepared=..., "
                f"block_frames={self.block_frames}, stride={self.stride}, growing={self.growing}, "
                f"reads_ahead={self.reads_ahead})")


class _JobSources(OpenSources):
    """One thread's open job Sources (a Source's reused read buffer is one task's at a time), keyed by their
    configs, within the process's one budget of open sources: a long-lived worker, or lazy arrays over many
    files, keeps at most the budget open. Each remembers its files' identity, so a file rewritten in place (same
    path, new inode) is reopened instead of read through a stale handle. An ensemble's round Source holds no file
    of its own (its members take their shares where they are opened): it is kept beside, the latest only, the
    rounds before let go of, not closed (the next round reads their open members)."""

    def __init__(self) -> None:
        super().__init__(BUDGET, lambda key, src: src.__dict__.pop("_scratch", None), list_paths=False)
        self.identity: dict[tuple, tuple] = {}
        self.round: tuple[tuple, Source] | None = None

    def drop(self, key: tuple) -> None:
        self.identity.pop(key, None)
        super().drop(key)


_SOURCES: dict[int, _JobSources] = {}
_ANALYSES: dict[tuple, Analysis] = {}


def _thread_sources() -> _JobSources:
    return _SOURCES.setdefault(threading.get_ident(), _JobSources())


#: The configs keyed last, by identity, with their keys: a worker's tasks of one job (loaded once: jobfile.py)
#: share its configs, and an ensemble round's lists its members (its text is milliseconds a task to make).
#: A config is a plain value, never changed once made (a Job's).
_KEYED: list[tuple[dict, tuple]] = []


def _key(config: dict) -> tuple:
    for seen, key in list(_KEYED):
        if seen is config:
            return key
    key = tuple(sorted((k, repr(v)) for k, v in config.items()))
    _KEYED[:] = [(config, key), *_KEYED[:3]]
    return key


def _config_paths(config: dict) -> list[str]:
    """The files a source config names; not a segmented source's parts (stat-ing every part of a 10,000-part chain
    per task is a metadata storm: :meth:`~trajscale.sources.base.Source.refresh` checks the parts a task reads)."""
    paths = [config[k] for k in ("path", "index", "topology") if isinstance(config.get(k), (str, os.PathLike))]
    return [str(p) for p in paths] + [str(p) for p in config.get("trajectories") or ()]


def _traits_of_config(config: dict, trait: str) -> bool:
    """The config's Source's declared capability ``trait`` (a class attribute of :class:`Source`)."""
    from ..sources.registry import source_class

    kind = config.get("kind")
    return bool(kind) and bool(getattr(source_class(kind), trait))


def cached_source(config: dict, comm=None) -> tuple[Source, float]:
    """The process's Source for ``config`` and the seconds opening it now (0: cached; reopened if its files changed)."""
    key, cache = _key(config), _thread_sources()
    rounds = _traits_of_config(config, "replaced_each_round")
    ident = () if rounds else file_identity(_config_paths(config))
    src = cache.round[1] if rounds and cache.round and cache.round[0] == key else None if rounds else cache.use(key)
    if src is not None:
        if rounds or cache.identity[key] == ident:
            src.refresh()   # files it opened lazily (segments) are checked as tasks read them
            return src, 0.0
        log.debug("%s changed since it was opened: reopening", _config_paths(config)[:1])
        cache.drop(key)
    if _traits_of_config(config, "ships_offsets"):   # a growing file ships longer offsets each round
        same = {("kind", repr(config.get("kind"))), ("path", repr(config.get("path")))}
        for old in [k for k in cache if same <= set(k)]:
            cache.drop(old)
    t0 = time.perf_counter()
    if not rounds:
        cache.make_room()
    src = source_from_config(config, comm=comm)
    src.reuse_buffers = True   # tasks run one at a time per thread; map keeps no views of a block
    _keep(cache, key, ident, src, rounds)
    return src, time.perf_counter() - t0


def _keep(cache: _JobSources, key: tuple, ident: tuple, src: Source, rounds: bool) -> None:
    """``src``, just opened, kept as the thread's for ``key`` (a round's beside the budget, the last let go of)."""
    if rounds:
        cache.round = (key, src)
    else:
        cache.add(key, src)
        cache.identity[key] = ident


#: Looks at a file being written whose metadata a task found mid-flush, and the seconds between them.
GROWING_TRIES, GROWING_WAIT_S = 40, 0.25   # (10 s: a loaded machine's opens span several flushes)


def _opened(job: Job, comm=None) -> tuple[Source, float]:
    """:func:`cached_source` of the job's trajectory.  A file still being written (its writer flushes
    HDF5's metadata in no set order) is looked at again before its error is the task's; under MPI the
    ranks open collectively, and an error is at once."""
    tries = GROWING_TRIES if job.growing and comm is None else 1
    for attempt in range(1, tries + 1):
        try:
            return cached_source(job.source, comm)
        except InputFileError as exc:
            if attempt == tries:
                raise
            log.debug("%s mid-flush: looking again (%s)", _config_paths(job.source)[:1], exc)
            time.sleep(GROWING_WAIT_S)
    raise AssertionError("no look")   # (tries >= 1: the loop returns or raises)


def adopt_source(config: dict, source: Source) -> None:
    """Keep ``source``, opened to prepare the job, as this thread's (:attr:`Executor.adopts_sources`)."""
    cache, key = _thread_sources(), _key(config)
    rounds = _traits_of_config(config, "replaced_each_round")
    if key in cache and cache.use(key) is not source:
        cache.drop(key)
    source.reuse_buffers = True
    if key not in cache:
        _keep(cache, key, () if rounds else file_identity(_config_paths(config)), source, rounds)


def close_cached_sources() -> None:
    """Close every cached source of every thread; no task may be running in this process."""
    caches = list(_SOURCES.values())
    _SOURCES.clear()
    _ANALYSES.clear()
    for cache in caches:
        cache.close()
        if cache.round is not None:
            cache.round[1].close()


def opened_files(config: dict, source: Source, before: int, opened_now: bool) -> tuple[str, ...]:
    """Files opened since ``before``: a segmented source's parts, or the config's file if opened just now."""
    listed = source.opened
    if listed is not None:
        return tuple(listed[before:])
    if opened_now:
        paths = [config.get("path")] if config.get("path") else list(config.get("trajectories") or ())
        return tuple(str(p) for p in paths)
    return ()


def _analysis(config: dict) -> Analysis:
    key = _key(config)
    if key not in _ANALYSES:
        _ANALYSES[key] = analysis_from_config(config)
    return _ANALYSES[key]


def blocks_of(frames: FrameRange, block_frames: int, align: int = 1, stride: int = 1) -> list[FrameRange]:
    """``frames`` in blocks of at most ``block_frames`` kept frames, each starting on a kept frame; without a
    stride, cuts are rounded down to a multiple of ``align`` (whole storage chunks per read)."""
    per = max(1, int(block_frames))
    if len(range(frames.start, frames.stop, stride)) <= per:
        return [frames]
    if stride == 1 and per >= align > 1:
        per = per // align * align
    per *= stride
    cuts = [*range(frames.start, frames.stop, per), frames.stop]
    return [FrameRange(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=False)]


class Fold:
    """Partials combined in order as they come, so that a process holds a few, never one per block or task.

    Reducing a run's partials in ordered batches equals reducing them all at once. A partial that
    arrives early waits for those before it; every contiguous run of ``batch`` (or ``batch_bytes``) is
    reduced into the partial before it, so a per-frame analysis's rows are copied once per batch.
    """

    #: Partials reduced at once: enough that a per-frame analysis's rows are not copied over and over...
    BATCH = 32
    #: ...unless they hold more than this (an all-atom RMSF's sums are 3 MB a partial for 47,681 atoms).
    BATCH_BYTES = 32 * 2**20

    def __init__(self, analysis: Analysis, batch: int = BATCH, batch_bytes: int = BATCH_BYTES) -> None:
        self.analysis, self.batch, self.batch_bytes = analysis, max(2, int(batch)), batch_bytes
        self._waiting: dict[int, object] = {}   # arrived before an earlier one
        self._run: list = []                    # in order, not yet reduced (the reduced one first)
        self._bytes = 0                         # of the run's partials after the reduced one
        self._next = 0

    def add(self, partial, index: int | None = None) -> None:
        """The partial of block or task ``index`` (the next one when not given)."""
        self._waiting[self._next if index is None else index] = partial
        while self._next in self._waiting:
            got = self._waiting.pop(self._next)
            self._run.append(got)
            self._bytes += _nbytes(got)
            self._next += 1
            if len(self._run) > self.batch or (len(self._run) > 2 and self._bytes > self.batch_bytes):
                self._run, self._bytes = [self.analysis.reduce(self._run)], 0

    def partials(self) -> list:
        """What came, in order: the reduced partial and those after it (a gap, then those waiting)."""
        return [*self._run, *(self._waiting[i] for i in sorted(self._waiting))]

    def reduced(self):
        """Everything that came as one partial."""
        got = self.partials()
        return got[0] if len(got) == 1 else self.analysis.reduce(got)


_NO_ARRAYS = frozenset({str, bytes, int, float, bool, type(None)})
#: A dataclass type's field names (looked up once), less those marked ``held``: reducing keeps them whole.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _nbytes(obj) -> int:
    """The bytes of the NumPy arrays in a partial (a dict, a sequence, a dataclass of them)."""
    kind = type(obj)
    if kind in _NO_ARRAYS or isinstance(obj, str | bytes | int | float | None):
        return 0
    if hasattr(obj, "nbytes") and hasattr(obj, "dtype"):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(_nbytes(v) for v in obj)
    names = _FIELD_NAMES.get(kind)
    if names is None:
        if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
            return 0
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(obj) if not f.metadata.get("held"))
    return sum(_nbytes(getattr(obj, name)) for name in names)


def _stop_here(comm) -> bool:
    """At a stop signal between blocks: raise it where a task runs alone; under MPI return True, and the
    rank leaves its task (its reads are not collective) and agrees on the stop with the others after it."""
    if comm is None:
        raise_if_stopped()
    return bool(stop_requested())


def run_task(job: Job, task: int, frames: FrameRange, worker: str, comm=None,
             then: FrameRange | None = None) -> tuple[object, TaskTiming]:
    """Read frames ``[start, stop)`` and map them, block by block; return the partial and its timings.

    Blocks hold at most ``job.block_frames`` frames (the reused read buffer bounds the worker's memory). While a
    block is mapped, the source is told the next read (:meth:`~trajscale.sources.base.Source.prefetch`): the task's
    next block, or the first block of ``then``, the task this worker runs next.  A stop signal ends the task between
    blocks.  User errors keep their type; anything else becomes a TaskError naming the worker and the frame range.
    """
    host, pid = host_and_pid()
    t_start = mark_ready()   # a no-op after the worker's warm-up or first task: its start-up
    hide_in_logs(logging.lastResort)   # (what a worker with no logging of its own prints: a spawned one, Dask's)
    t_begin = time.time()
    try:
        analysis = _analysis(job.analysis)
        source, t_init_traj = _opened(job, comm)
        bytes0, opens0 = source.bytes_read, source.opens
        # a remote file's requests so far (a source opened for this task: its opening counts too)
        net0 = source.remote_stats() if t_init_traj == 0 else None
        paths0 = len(source.opened or ())
        t_io = t_compute = 0.0
        partials = Fold(analysis)   # a task's blocks reduced as they come: its memory is a few blocks' partials
        blocks = blocks_of(frames, job.block_frames, source.chunk_frames, job.stride)
        if then is not None:
            blocks.append(blocks_of(then, job.block_frames, source.chunk_frames, job.stride)[0])
        for k, r in enumerate(blocks[:len(blocks) - (then is not None)]):
            if _stop_here(comm):
                break
            t0 = time.perf_counter()
            if k + 1 < len(blocks):   # fetched while this block is read and mapped (a remote file's; in its budget)
                nxt = blocks[k + 1]
                source.prefetch(nxt.start, nxt.stop, job.prepared.atoms, analysis.fields, stride=job.stride)
            block = source.read(r.start, r.stop, job.prepared.atoms, analysis.fields, stride=job.stride)
            slow_phase_for_tests("read", worker)   # TRAJSCALE_TEST_SLOW_READ: a slow reader, for the report's tests
            t1 = time.perf_counter()
            if analysis.needs_box:   # refused here, once for every analysis and executor
                check_boxes(block.box, block.frames, source.path, analysis.name)
            partials.add(analysis.map(block, job.prepared))
            slow_phase_for_tests("compute", worker)
            del block   # its arrays are the reused buffer the next read fills
            t_io, t_compute = t_io + t1 - t0, t_compute + time.perf_counter() - t1
        t2 = time.perf_counter()
        partial = partials.reduced()
        t_compute += time.perf_counter() - t2
    except TrajscaleError:
        raise
    except Exception as exc:
        raise TaskError(worker, frames.start, frames.stop, f"{type(exc).__name__}: {exc}") from exc
    cpus, affinity = cpu_facts()   # per task: a worker's affinity may change while it lives
    timing = TaskTiming(task=task, start=frames.start, stop=frames.stop, stride=job.stride, worker=worker,
                        host=host, pid=pid, t_init_traj=t_init_traj, t_io=t_io, t_compute=t_compute,
                        bytes_read=source.bytes_read - bytes0,
                        files_opened=source.opens - opens0,
                        files=opened_files(job.source, source, paths0, t_init_traj > 0),
                        t_begin=t_begin, t_end=time.time(), t_start=t_start, t_ready=process_start() + t_start,
                        cpus=cpus, affinity=affinity, **_fetched(net0, source.remote_stats()))
    return partial, timing


def run_in_turn(job: Job, tasks: Iterable[tuple[int, FrameRange]], worker: str,
                before: Callable[[int], None] | None = None,
                after: Callable[[], None] | None = None) -> Iterator[tuple[int, tuple[object, TaskTiming]]]:
    """:func:`run_task` for each ``(task, frames)`` in turn, each told the next one's frames (``then``).
    The next task is asked of ``tasks`` when one begins (a :class:`~.claims.TaskClaims` takes it then).
    Yields ``(task, (partial, timing))`` as each ends."""
    pending = iter(tasks)
    nxt = next(pending, None)
    while nxt is not None:
        task, frames = nxt
        if before is not None:
            before(task)
        nxt = next(pending, None)
        result = run_task(job, task, frames, worker, then=None if nxt is None else nxt[1])
        if after is not None:
            after()
        yield task, result


def _fetched(before: dict | None, after: dict | None) -> dict:
    """A task's share of a remote file's requests, bytes, network wait and retries (none for local files)."""
    if after is None:
        return {}
    before = before or {}
    d = {k: after[k] - before.get(k, 0) for k in after}
    return {"requests": int(d["requests"]), "bytes_fetched": int(d["bytes"]), "t_network": float(d["wait_s"]),
            "retries": int(d["retries"])}


@dataclass(frozen=True, eq=False)
class TaskResults:
    """What :meth:`Executor.map_tasks` brings home to the root: the tasks' partials and timings together.

    ``partials`` are in frame order: one per task, or one per worker for an executor that reduces
    where they ran (MPI).  ``timings`` holds one TaskTiming per task, in task order; ``workers`` the
    per-worker records (start-up, t_wait, t_comm), by worker name; ``io`` how the tasks read.
    """

    partials: tuple
    timings: tuple[TaskTiming, ...]
    workers: dict[str, dict] = field(default_factory=dict)
    io: dict = field(default_factory=dict)

    @classmethod
    def of(cls, pairs: list[tuple[object, TaskTiming]], workers: dict | None = None,
           io: dict | None = None) -> TaskResults:
        """From ``(partial, timing)`` per task, in task order."""
        return cls(tuple(p for p, _ in pairs), tuple(t for _, t in pairs), dict(workers or {}), dict(io or {}))

    def with_timings(self, timings: list[TaskTiming]) -> TaskResults:
        """The same results with each task's timing replaced (in task order)."""
        return dataclasses.replace(self, timings=tuple(timings))


class Homecoming:
    """The tasks' results as they come home to the root, in any order: partials folded, timings in task order."""

    def __init__(self, job: Job, n_tasks: int) -> None:
        self._fold = Fold(_analysis(job.analysis))
        self._timings: list = [None] * n_tasks

    def add(self, task: int, result: tuple[object, TaskTiming]) -> None:
        partial, self._timings[task] = result
        self._fold.add(partial, task)

    def arrived(self, task: int) -> bool:
        return self._timings[task] is not None

    @property
    def n_home(self) -> int:
        return sum(t is not None for t in self._timings)

    @property
    def timings(self) -> tuple:
        """Each task's timing, in task order (None: not yet home)."""
        return tuple(self._timings)

    def results(self, workers: dict | None = None, io: dict | None = None) -> TaskResults:
        return TaskResults(tuple(self._fold.partials()), tuple(self._timings), dict(workers or {}), dict(io or {}))


def io_of(source_options: dict, collective: bool = False) -> dict:
    """How tasks read, for the report: the driver and collective reads asked for, and done."""
    return {"driver": source_options.get("driver"), "collective_requested": bool(source_options.get("collective")),
            "collective": collective}


def sendable(job: Job) -> bytes:
    """``job`` pickled; what pickle cannot take is refused in one line."""
    try:
        return pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise ConfigError(f"the job cannot be sent to the workers: pickle cannot take it ({type(exc).__name__}: "
                          f"{exc}); an analysis's prepared state must hold plain values and NumPy arrays") from None


class Executor(ABC):
    """Where tasks run: :meth:`map_tasks` runs them and brings their results home, :meth:`close` ends the workers.

    What the rest of trajscale needs to know of an executor is declared, never probed: here as class attributes and
    properties, and in its registry entry (:attr:`traits`), which gives it its :attr:`name`.
    """

    #: Its registry entry, found by the class's import path; a subclass outside the registry keeps its parent's.
    traits: ClassVar[ExecutorTraits | None] = None
    #: The registry's name for it ("" outside the registry).
    name: ClassVar[str] = ""
    #: True when every process of the job calls ``run`` (SPMD, MPI).
    spmd: ClassVar[bool] = False
    #: True when the executor checks, between tasks, for a Ctrl-C the launcher recorded
    #: (:func:`trajscale.util.polling_for_stop`); the others are interrupted where they run.
    polls_for_stop: ClassVar[bool] = False
    #: True when the tasks run in the launching thread, so the source opened to plan the run serves them.
    adopts_sources: ClassVar[bool] = False
    #: Worker name of the process that prepares the job, if it also runs tasks.
    root_worker: ClassVar[str | None] = None

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        here = f"{cls.__module__}:{cls.__qualname__}"
        traits = next((t for t in EXECUTORS.values() if t.entry == here), None)
        if traits is not None:
            cls.traits, cls.name = traits, traits.name

    def __init__(self, n_workers: int = 1) -> None:
        self.n_workers = max(1, int(n_workers))

    @property
    def is_root(self) -> bool:
        """True where results come home (False only on MPI ranks other than 0)."""
        return True

    @property
    def source_options(self) -> dict:
        """Options this executor wants in H5MD source configs (e.g. ``driver="mpio"``)."""
        return {}

    @property
    def uses_external_cluster(self) -> bool:
        """True when the workers belong to a cluster this executor did not start (a Dask scheduler address)."""
        return False

    @property
    def late_starts(self) -> dict[str, dict]:
        """After :meth:`close`: start-up records of workers not ready when the tasks were done."""
        return {}

    def start(self, modules: tuple[str, ...] = (), late: bool = False) -> None:   # noqa: B027 - optional
        """Start workers now, before the job is ready (pools); a no-op by default.

        ``modules``: what the job's tasks will import beyond trajscale's own, for workers to start with.
        ``late``: the job is prepared already: this process may hold an HDF5 file or a URL client's
        runtime, so no worker forks from it."""

    def broadcast(self, obj):
        """``obj`` from the root to every process of the job (SPMD); the object itself elsewhere."""
        return obj

    @abstractmethod
    def map_tasks(self, job: Job, ranges: list[FrameRange], progress: bool = False) -> TaskResults | None:
        """Run :func:`run_task` for every range; their results and timings on the root, None elsewhere."""

    def close(self, wait: bool = True) -> None:   # noqa: B027 - optional; the default executor holds nothing
        """Release what this executor started; ``wait=False`` does not wait for tasks.  Closing twice is harmless."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def refuse_if_launched(ex: Executor, own: bool) -> None:
    """Refuse a non-MPI executor in a process that an MPI launcher started as one of several (each would
    run the whole job); a Dask client on an outside cluster is the exception.  ``own``: close ``ex`` first.
    """
    if ex.spmd or ex.uses_external_cluster:
        return
    try:
        check_not_launched(ex.name)
    except TrajscaleError:
        if own:
            ex.close()
        raise

