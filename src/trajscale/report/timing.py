"""Timing records filled by the task wrapper, and the RunReport that holds them.

Every executor runs tasks through :func:`trajscale.executors.base.run_task`, so every report reads the same way.
Phases (Jakupovic & Beckstein 2021, Table 3): ``t_init_top``, ``t_init_traj``, ``t_io``, ``t_compute``, ``t_wait``
and ``t_comm``; each worker's ``t_start`` (process start to ready) and the launching process's ``process`` record."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..facts import LayoutFacts
from .runfacts import RunFacts

PHASES = ("t_init_top", "t_init_traj", "t_io", "t_compute", "t_wait", "t_comm")
#: A worker's (rank's) phases: its start-up, then the task phases.
WORKER_PHASES = ("t_start", *PHASES)
REPORT_VERSION = 1


@dataclass(frozen=True, slots=True)
class TaskTiming:
    """What one task (a block of frames on one worker) spent, in seconds."""

    task: int
    start: int
    stop: int
    worker: str
    host: str = ""
    pid: int = 0
    t_init_top: float = 0.0
    t_init_traj: float = 0.0
    t_io: float = 0.0
    t_compute: float = 0.0
    t_wait: float = 0.0
    t_comm: float = 0.0
    bytes_read: int = 0
    t_begin: float = 0.0      # epoch seconds, for traces
    t_end: float = 0.0
    t_sched_start: float | None = None   # scheduler-side (Dask) start/stop, epoch seconds
    t_sched_stop: float | None = None
    stride: int = 1                      # frames start, start + stride, ... below stop were analysed
    files_opened: int = 0                # trajectory files (segments, parts) this task opened
    files: tuple[str, ...] = ()          # their paths (and the single file, if this task opened it)
    t_start: float = 0.0                 # its worker's start: process start to ready (not in t_total)
    t_ready: float = 0.0                 # epoch seconds when its worker became ready
    cpus: int = 0                        # CPUs of its host (os.cpu_count); 0: not recorded (older reports)
    affinity: str = ""                   # CPUs its process may run on, listed as Linux lists them ("0-3,8")
    requests: int = 0                    # a remote trajectory's range requests (0: local files)
    bytes_fetched: int = 0               # bytes those requests brought (metadata blocks included)
    t_network: float = 0.0               # seconds waiting on them (within t_io and t_init_traj)
    retries: int = 0                     # requests tried again (timeouts, dropped connections, 5xx, SlowDown)

    @property
    def frames(self) -> int:
        return len(range(self.start, self.stop, self.stride))

    @property
    def t_total(self) -> float:
        return sum(getattr(self, p) for p in PHASES)


@dataclass(frozen=True, slots=True)
class WorkerTiming:
    """Sum of one worker's (rank's) tasks plus its waits and communication."""

    worker: str
    host: str
    pid: int
    n_tasks: int
    frames: int
    bytes_read: int
    t_init_top: float
    t_init_traj: float
    t_io: float
    t_compute: float
    t_wait: float
    t_comm: float
    #: Seconds from the worker's (rank's) process start to being ready for its first task;
    #: not in :attr:`t_total`, which is its time inside the run.
    t_start: float = 0.0
    #: Epoch seconds when it became ready (0: unknown).
    t_ready: float = 0.0
    #: Paths of the trajectory files this worker (rank) opened, in the order opened, each once.
    files_opened: tuple[str, ...] = ()
    #: CPUs of its host (``os.cpu_count``); 0: not recorded (reports written before it was).
    cpus: int = 0
    #: CPUs its process may run on (``os.sched_getaffinity``), as Linux lists them: ``"0-3,8"``.
    affinity: str = ""

    @property
    def t_total(self) -> float:
        return sum(getattr(self, p) for p in PHASES)


def summarize_workers(tasks: list[TaskTiming], extra: dict[str, dict] | None = None) -> list[WorkerTiming]:
    """Group task timings by worker; ``extra[worker]`` adds per-worker t_wait/t_comm etc."""
    extra = extra or {}
    names = list(dict.fromkeys([t.worker for t in tasks] + list(extra)))
    out = []
    for name in names:
        mine = [t for t in tasks if t.worker == name]
        add = extra.get(name, {})
        first = mine[0] if mine else None
        sums = {p: sum(getattr(t, p) for t in mine) + float(add.get(p, 0.0)) for p in PHASES}
        out.append(WorkerTiming(
            worker=name, host=add.get("host", first.host if first else ""),
            pid=int(add.get("pid", first.pid if first else 0)), n_tasks=len(mine),
            frames=sum(t.frames for t in mine), bytes_read=sum(t.bytes_read for t in mine), **sums,
            t_start=float(add.get("t_start", max((t.t_start for t in mine), default=0.0))),
            t_ready=float(add.get("t_ready", max((t.t_ready for t in mine), default=0.0))),
            files_opened=tuple(dict.fromkeys([*add.get("files_opened", ()), *(f for t in mine for f in t.files)])),
            cpus=int(add.get("cpus", first.cpus if first else 0)),
            affinity=str(add.get("affinity", first.affinity if first else ""))))
    return out


@dataclass(repr=False)
class RunReport:
    """Everything measured in one run; JSON-serialisable.  ``tasks`` holds one record per task, ``workers``
    one per worker or rank.  ``trajscale.run`` returns a :class:`~.summary.Report`, which adds the
    printed summary and the diagnosis."""

    analysis: str
    executor: str
    n_workers: int
    n_frames: int
    n_atoms: int
    #: The storage facts of the run's source (:meth:`~trajscale.sources.base.Source.layout_summary`).
    source: LayoutFacts
    t_total: float
    t_prepare: float = 0.0
    t_reduce: float = 0.0
    tasks: list[TaskTiming] = field(default_factory=list)
    workers: list[WorkerTiming] = field(default_factory=list)
    #: What the run was and how it went beside its timings (files, executor choice, I/O, payload, ending).
    meta: RunFacts = field(default_factory=RunFacts)
    #: The launching process, from its start: ``t_wall``, ``phases`` (seconds per phase of
    #: :data:`~trajscale.timeline.PROCESS_PHASES`, adding up to ``t_wall``), ``origin`` ("process start" or
    #: "run start"), ``t_begin``/``t_end`` (epoch seconds).  Empty in older reports.
    process: dict = field(default_factory=dict)
    #: What the run shared its machine with and whether its files were in the page cache at its start:
    #: :class:`~trajscale.report.conditions.RunConditions` as plain values (empty: not recorded).
    conditions: dict = field(default_factory=dict)
    version: int = REPORT_VERSION

    def __repr__(self) -> str:   # the dataclass repr would print every task record
        return (f"<RunReport {self.analysis} on {self.executor} x{self.n_workers}: {self.n_frames} frames, "
                f"{self.n_tasks} tasks, {self.t_total:.3f} s>")

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    @property
    def bytes_read(self) -> int:
        return sum(t.bytes_read for t in self.tasks)

    def fetched(self) -> dict:
        """A remote trajectory's requests, bytes, network wait and retries: the tasks' and the preparation's."""
        root = self.meta.fetched_prepare or {}
        return {"requests": sum(t.requests for t in self.tasks) + int(root.get("requests", 0)),
                "bytes": sum(t.bytes_fetched for t in self.tasks) + int(root.get("bytes", 0)),
                "wait_s": sum(t.t_network for t in self.tasks) + float(root.get("wait_s", 0.0)),
                "retries": sum(t.retries for t in self.tasks) + int(root.get("retries", 0)),
                "prepare": dict(root)}

    def to_dict(self) -> dict:
        """Plain values (a :class:`~.summary.Report` adds its diagnosis)."""
        d = asdict(self)   # (its tasks' and workers' records too)
        d["source"] = self.source.to_dict()
        d["meta"] = self.meta.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunReport:
        d = dict(d)
        if "source" in d:   # (null: no facts recorded)
            d["source"] = LayoutFacts.from_dict(d["source"] or {})
        known_t = {f.name for f in fields(TaskTiming)}
        known_w = {f.name for f in fields(WorkerTiming)}
        d["tasks"] = [TaskTiming(**{k: _tuple_files(k, v) for k, v in t.items() if k in known_t})
                      for t in d.get("tasks", [])]
        d["workers"] = [WorkerTiming(**{k: _tuple_files(k, v) for k, v in w.items() if k in known_w})
                        for w in d.get("workers", [])]
        d["meta"] = RunFacts.from_dict(d.get("meta"))
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def add_to_phase(self, phase: str) -> None:
        """Count the time since the ``process`` record ended as ``phase`` (the CLI: writing results)."""
        from ..timeline import extend_record

        extend_record(self.process, phase)

    def write(self, path: str | os.PathLike, phase: str | None = None) -> None:
        """Write as JSON atomically; ``phase``: the time since the ``process`` record ended is added to it first."""
        from ..storage import redacted
        from ..util import save_output

        d = redacted(self.to_dict())   # (a URL's password, a secret option: never written)
        if phase is not None and self.process:
            self.add_to_phase(phase)   # after the diagnosis: the serialisation is the write's cost
            d["process"] = dict(self.process, phases=dict(self.process["phases"]))
        text = json.dumps(d, indent=1)
        save_output(path, lambda tmp: Path(tmp).write_text(text))

    @classmethod
    def load(cls, path: str | os.PathLike) -> RunReport:
        from ..errors import InputFileError

        p = Path(path)
        if not p.is_file():
            raise InputFileError(p, "no such report file")
        try:
            return cls.from_dict(json.loads(p.read_text()))
        except (ValueError, TypeError, KeyError) as exc:   # JSONDecodeError, UnicodeDecodeError are ValueErrors
            raise InputFileError(p, f"not a trajscale run report ({exc})") from None


def _tuple_files(key: str, value):
    """JSON lists of paths back to the records' tuples."""
    return tuple(value) if key in ("files", "files_opened") and isinstance(value, list) else value


def host_and_pid() -> tuple[str, int]:
    from ..util import host_name

    return host_name(), os.getpid()

