"""What a run was and how it went, beside its timings: the typed record a :class:`~.timing.RunReport` holds.

Every kind of run fills the same record, so the advice and the prediction read one shape.
:meth:`RunFacts.from_dict` also reads the plain ``"meta"`` dict of older reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..launch import SchedulerJob
from ..launch import current as current_launch
from .payload import Payload

TYPE_CHECKING = False
if TYPE_CHECKING:   # (defined in .kinds, importable from here: see __getattr__ below)
    from .kinds import AnalysisShare, ExecutorChoice, FollowFacts


@dataclass(frozen=True, slots=True)
class IOFacts:
    """How the tasks really read: the HDF5 driver, and whether collective MPI-IO was asked for and kept."""

    driver: str | None = None
    collective_requested: bool = False
    collective: bool = False

    def to_dict(self) -> dict:
        return {"driver": self.driver, "collective_requested": self.collective_requested,
                "collective": self.collective}

    @classmethod
    def from_dict(cls, d) -> IOFacts | None:
        if not isinstance(d, dict):
            return None
        return cls(d.get("driver"), bool(d.get("collective_requested")), bool(d.get("collective")))


@dataclass(frozen=True, slots=True)
class RunFacts:
    """The facts of one run, beside its timings.

    Attributes
    ----------
    analysis_config
        The analysis's options as the user gave them (:func:`~trajscale.analysis.user.readable_config`).
    n_tasks, n_tasks_asked
        Tasks run, and the number asked for (None: the default per worker).
    step
        Every ``step``-th frame was analysed.
    io
        How the tasks read (None: not recorded).
    topology, trajectories
        The topology file and the trajectory files as given (None: objects, not files).
    payload
        What the job and the partial results weigh pickled (None: not measured).
    executor_choice
        What ``executor="auto"`` chose and why (None: the executor was named).
    follow
        A followed run's frames and ending (None: a finished trajectory).
    backend, note
        Who ran it when it was not ``trajscale.run`` (``trajscale.mda``'s backends), and a word on its timings.
    analyses
        Several analyses run in one pass: each one's compute time and atoms (empty: one analysis).
    job
        The scheduler's job it ran in: job and step ids, how many times it was requeued (by default the job
        of the process that makes the record; None: no scheduler, or a report written before it was recorded).
    worker_jobs
        The scheduler's jobs its workers ran in (Dask workers started as SLURM jobs; empty: none, or a
        report written before they were recorded).
    fetched_prepare
        A trajectory behind a URL: the requests, bytes, seconds waiting on them and retries of the process
        that prepared the job (its look at the object, HDF5's metadata, the chunk addresses, the reference
        frame), beside the tasks' own (None: no request, or a report written before they were recorded).
    """

    analysis_config: dict = field(default_factory=dict)
    n_tasks: int = 0
    n_tasks_asked: int | None = None
    step: int = 1
    io: IOFacts | None = None
    topology: str | None = None
    trajectories: tuple[str, ...] | None = None
    payload: Payload | None = None
    executor_choice: ExecutorChoice | None = None
    follow: FollowFacts | None = None
    backend: str | None = None
    note: str | None = None
    analyses: tuple[AnalysisShare, ...] = ()
    job: SchedulerJob | None = field(default_factory=lambda: current_launch().job)
    worker_jobs: tuple[str, ...] = ()
    fetched_prepare: dict | None = None

    def to_dict(self) -> dict:
        """Plain values, under the keys reports have always used (optional ones left out when absent)."""
        d = {"analysis_config": self.analysis_config, "n_tasks": self.n_tasks, "n_tasks_asked": self.n_tasks_asked,
             "step": self.step, "io": self.io.to_dict() if self.io else None, "topology": self.topology,
             "trajectories": list(self.trajectories) if self.trajectories is not None else None,
             "payload": self.payload.to_dict() if self.payload else None}
        optional = {"executor_choice": self.executor_choice, "follow": self.follow, "job": self.job}
        d.update({k: v.to_dict() for k, v in optional.items() if v is not None})
        d.update({k: v for k, v in (("backend", self.backend), ("note", self.note)) if v is not None})
        if self.analyses:
            d["analyses"] = [a.to_dict() for a in self.analyses]
        if self.worker_jobs:
            d["worker_jobs"] = list(self.worker_jobs)
        if self.fetched_prepare:
            d["fetched_prepare"] = dict(self.fetched_prepare)
        return d

    @classmethod
    def from_dict(cls, d) -> RunFacts:
        """From :meth:`to_dict`, or an older report's ``meta`` (missing keys: defaults; wrong kinds: left out)."""
        if not isinstance(d, dict):
            return cls()
        from .kinds import AnalysisShare, ExecutorChoice, FollowFacts

        given = d.get("trajectories")
        asked = d.get("n_tasks_asked")
        workers = d.get("worker_jobs")
        fetched = d.get("fetched_prepare")
        return cls(analysis_config=dict(d.get("analysis_config") or {}), n_tasks=int(d.get("n_tasks") or 0),
                   n_tasks_asked=int(asked) if isinstance(asked, int | float) else None,
                   step=int(d.get("step") or 1), io=IOFacts.from_dict(d.get("io")),
                   topology=str(d["topology"]) if d.get("topology") else None,
                   trajectories=tuple(str(t) for t in given) if isinstance(given, list | tuple) and given else None,
                   payload=Payload.from_dict(d.get("payload")),
                   executor_choice=ExecutorChoice.from_dict(d.get("executor_choice")),
                   follow=FollowFacts.from_dict(d.get("follow")), backend=d.get("backend"), note=d.get("note"),
                   analyses=tuple(a for a in map(AnalysisShare.from_dict, d.get("analyses") or ()) if a),
                   job=SchedulerJob.from_dict(d.get("job")),
                   worker_jobs=tuple(str(j) for j in workers) if isinstance(workers, list | tuple) else (),
                   fetched_prepare={k: fetched.get(k, 0) for k in ("requests", "bytes", "wait_s", "retries")}
                   if isinstance(fetched, dict) else None)


#: The records only some runs have, defined in :mod:`.kinds` and importable from here.
_OF_SOME_RUNS = ("AnalysisShare", "ExecutorChoice", "FollowFacts")


def __getattr__(name: str):
    if name in _OF_SOME_RUNS:
        from . import kinds

        return getattr(kinds, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AnalysisShare", "ExecutorChoice", "FollowFacts", "IOFacts", "RunFacts"]
