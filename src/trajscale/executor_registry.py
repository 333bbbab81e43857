"""The executors trajscale knows: one registry of names, each with what the rest of trajscale reads of it.

Everything that names executors derives from :data:`EXECUTORS`: ``make_executor``, the CLI's
``--executor`` choices, convert's segment pool, the demo, the probe and the scaling prediction.
Each entry is an :class:`ExecutorTraits`, a small declarative record: where the executor's class
lives (imported only when one is built), how its workers are counted and launched, what moves
between its processes, how it opens files. The prediction's terms (docs/scaling.md) read these
traits and never an executor's name, so adding an executor takes its own module, one entry here
and its tests (:class:`trajscale.testing.ExecutorConformance`).

This module imports nothing of trajscale but its errors: the report package and the executors
both read it, and it must stay below both.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError

#: ``ExecutorTraits.workers``: one worker; ``-n N`` workers; the ranks of the MPI launcher (``mpiexec -n N``).
WORKER_COUNTS = ("one", "n_workers", "launcher")
#: ``job_moves``/``partials_move``: never (shared memory), once per task, once per worker with tasks,
#: or down a broadcast tree (``ceil(log2 N)`` stages).
MOVES = ("none", "per_task", "per_worker", "tree")
#: ``launch``, how the prediction builds the start of N workers from one fresh worker's start:
#: ``fork_server`` (one server starts, workers fork from it), ``every_rank`` (every rank runs the
#: launcher's imports; beyond the cores they share them), ``nanny`` (each worker is a nanny and a
#: worker process, two fresh starts each, over the cores).
LAUNCHES = ("fork_server", "every_rank", "nanny")


@dataclass(frozen=True, slots=True)
class ExecutorTraits:
    """What trajscale reads of one executor, declared once.

    Attributes
    ----------
    name
        The registry's key: ``--executor NAME``, ``executor="NAME"``.
    entry
        ``"module:Class"`` of the :class:`~trajscale.executors.base.Executor`.
    summary
        One line for the CLI's help.
    requires
        Modules it needs installed (optional extras), checked before a calibration runs it.
    workers
        How its workers are counted (:data:`WORKER_COUNTS`).
    job_moves, partials_move
        How often the pickled job goes out and the partials come home (:data:`MOVES`): a process
        pool sends the job with each task and gets each task's partial back; Dask sends the job once
        to each worker; MPI broadcasts it down a tree and gathers one partial per rank (a per-frame
        analysis: its rows, once); threads share memory.
    launch
        How the prediction models starting N workers (:data:`LAUNCHES`); None: not predicted.
    launch_phase
        The launching process's phase that times the start of the parallel part (the fit reads it).
    starts_on_demand
        Workers start as tasks come (a process pool), so a run starts at most one per task.
    collective_open
        Opens an H5MD file collectively on all workers (MPI-IO): each further rank adds to the open.
    polls_while_waiting
        Workers spin while they wait (MPI collectives): beyond the cores the launcher's serial
        phases share rank 0's core, and calibration measures wall, not CPU, seconds.
    worker_imports
        Python code a fresh worker runs before its first task (``trajscale probe`` times it).
    convert_runner
        ``"module:function"`` that runs convert's and rechunk's segment tasks on it; None: it does not.
    """

    name: str
    entry: str
    summary: str
    requires: tuple[str, ...] = ()
    workers: str = "n_workers"
    job_moves: str = "none"
    partials_move: str = "none"
    launch: str | None = None
    launch_phase: str | None = None
    starts_on_demand: bool = False
    collective_open: bool = False
    polls_while_waiting: bool = False
    worker_imports: str | None = None
    convert_runner: str | None = None

    def __post_init__(self) -> None:
        for field, value, allowed in (("workers", self.workers, WORKER_COUNTS), ("job_moves", self.job_moves, MOVES),
                                      ("partials_move", self.partials_move, MOVES),
                                      ("launch", self.launch, (None, *LAUNCHES))):
            if value not in allowed:
                raise ConfigError(f"executor {self.name!r}: {field} must be one of {allowed}, got {value!r}")

    @property
    def predicted(self) -> bool:
        """True when ``trajscale report --predict --as NAME`` can model it."""
        return self.launch is not None and self.launch_phase is not None

    @property
    def pickles_job(self) -> bool:
        """True when the job crosses a process boundary (it must pickle)."""
        return self.job_moves != "none"


_BASE = "import trajscale.executors.base"

#: name -> traits, in the order the CLI lists them.
EXECUTORS: dict[str, ExecutorTraits] = {t.name: t for t in (
    ExecutorTraits("serial", "trajscale.executors.serial:SerialExecutor", "every task in this process",
                   workers="one", convert_runner="trajscale.convert.pool:run_serial"),
    ExecutorTraits("processes", "trajscale.executors.processes:ProcessExecutor", "a local pool of worker processes",
                   job_moves="per_task", partials_move="per_task", launch="fork_server", launch_phase="pool_start",
                   starts_on_demand=True, worker_imports=_BASE, convert_runner="trajscale.convert.pool:run_processes"),
    ExecutorTraits("dask", "trajscale.executors.dask:DaskExecutor", "Dask distributed: a LocalCluster or a scheduler",
                   requires=("distributed",), job_moves="per_worker", partials_move="per_task", launch="nanny",
                   launch_phase="pool_start", worker_imports=f"import distributed; {_BASE}",
                   convert_runner="trajscale.convert.pool:run_dask"),
    ExecutorTraits("mpi", "trajscale.executors.mpi:MPIExecutor", "the ranks of mpiexec -n N trajscale ...",
                   requires=("mpi4py",), workers="launcher", job_moves="tree", partials_move="per_worker",
                   launch="every_rank", launch_phase="mpi_init", collective_open=True, polls_while_waiting=True,
                   worker_imports=f"from mpi4py import MPI; {_BASE}", convert_runner="trajscale.convert.pool:run_mpi"),
    ExecutorTraits("threads", "trajscale.executors.threads:ThreadExecutor",
                   "threads of this process (the compiled kernels release the GIL; HDF5 reads take turns)"),
)}

#: The executor a serial run's report is predicted on, when none is named (``report --predict``).
DEFAULT_PREDICTION = "mpi"


def executor_traits(name: str) -> ExecutorTraits:
    """The traits of the executor ``name``; an unknown name is refused, listing the registered ones."""
    try:
        return EXECUTORS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}") from None


def predicted_traits(name: str) -> ExecutorTraits:
    """The traits of ``name`` if the scaling prediction models it; else one error naming those it does."""
    traits = executor_traits(name)
    if not traits.predicted:
        raise ConfigError(f"the prediction models the executors {', '.join(names(predicted=True))}, not {name!r}")
    return traits


def launcher_executor() -> str:
    """The executor whose workers are the ranks of an MPI launcher: what a command started by
    ``mpiexec`` runs on when none is named."""
    return names(workers=("launcher",))[0]


def names(*, workers: tuple[str, ...] = WORKER_COUNTS, predicted: bool = False, converts: bool = False) -> list[str]:
    """Registered names, in order, of the executors with these traits (the CLI's choices derive from it)."""
    return [t.name for t in EXECUTORS.values() if t.workers in workers and (t.predicted or not predicted)
            and (t.convert_runner is not None or not converts)]


def load(path: str):
    """The object at ``"module:attribute"`` (an executor's class, a convert runner), imported now."""
    import importlib

    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["DEFAULT_PREDICTION", "EXECUTORS", "ExecutorTraits", "executor_traits", "launcher_executor", "load", "names",
           "predicted_traits"]
