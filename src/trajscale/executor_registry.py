"""The executors trajscale knows: one registry of names, each with what the rest of trajscale reads of it.

Everything that names executors derives from :data:`EXECUTORS`; the prediction reads traits, never names, so
adding an executor takes its module, one entry here and its tests (:class:`trajscale.testing.ExecutorConformance`).
It stays below both the report package and the executors, which read it."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError
from .formats import load

#: ``ExecutorTraits.workers``: one worker; ``-n N`` workers; the ranks of the MPI launcher (``mpiexec -n N``).
WORKER_COUNTS = ("one", "n_workers", "launcher")
#: ``job_moves``/``partials_move``: never (shared memory), once per task, once per worker with tasks,
#: or down a broadcast tree (``ceil(log2 N)`` stages).
MOVES = ("none", "per_task", "per_worker", "tree")
#: ``launch``, how the prediction builds the start of N workers from one fresh worker's start:
#: ``fork_server`` (workers fork from one server), ``every_rank`` (every rank runs the imports),
#: ``nanny`` (a nanny and a worker process per worker).
LAUNCHES = ("fork_server", "every_rank", "nanny")

#: ``ExecutorOption.kind``: a string, an int, a float, an on/off flag, a repeatable string.
OPTION_KINDS = ("str", "int", "float", "flag", "list")


@dataclass(frozen=True, slots=True)
class ExecutorOption:
    """One keyword option of an executor's class, and the command-line flag that gives it.

    Attributes
    ----------
    name
        The keyword of the executor's class (``scheduler``), and the CLI's dest.
    flag
        The command-line flag (``--scheduler``).
    help
        One line for the CLI's help.
    kind
        :data:`OPTION_KINDS`: how the flag's value is read.
    choices
        The values the flag takes (None: any).
    values
        ``(flag value, keyword value)`` pairs where they differ (``--driver default`` is ``driver=None``).
    metavar
        The value's name in the help.
    """

    name: str
    flag: str
    help: str
    kind: str = "str"
    choices: tuple[str, ...] | None = None
    values: tuple[tuple[str, object], ...] = ()
    metavar: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in OPTION_KINDS:
            raise ConfigError(f"option {self.flag}: kind must be one of {OPTION_KINDS}, got {self.kind!r}")

    def keyword_value(self, given):
        """The keyword's value for the flag's parsed value ``given``."""
        return dict(self.values).get(given, given) if isinstance(given, str) else given


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
        How often the pickled job goes out and the partials come home (:data:`MOVES`).
    launch
        How the prediction models starting N workers (:data:`LAUNCHES`); None: not predicted.
    launch_phase
        The launching process's phase that times the start of the parallel part (the fit reads it).
    starts_on_demand
        Workers start as tasks come (a process pool), so a run starts at most one per task.
    collective_open
        Opens an H5MD file collectively on all workers (MPI-IO): each further rank adds to the open.
    polls_while_waiting
        Workers spin while they wait (MPI collectives): calibration measures wall, not CPU, seconds.
    worker_imports
        Python code a fresh worker runs before its first task (``trajscale probe`` times it).
    convert_runner
        ``"module:function"`` that runs plain tasks on it (:func:`trajscale.convert.pool.run_tasks`); None: it does not.
    options
        Its class's own keyword options (:class:`ExecutorOption`), beside ``n_workers``.
    picks
        For a chooser (``auto``): the executors it picks from, the lightest first; its ``entry`` is
        the choosing function.
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
    options: tuple[ExecutorOption, ...] = ()
    picks: tuple[str, ...] = ()

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
    def chooses(self) -> bool:
        """True for ``auto``: it picks an executor, it is none."""
        return bool(self.picks)

    @property
    def pickles_job(self) -> bool:
        """True when the job crosses a process boundary (it must pickle)."""
        return self.job_moves != "none"


_BASE = "import trajscale.executors.base"
_SLURM = "SLURM jobs of --dask-cluster slurm"

#: name -> traits, in the order the CLI lists them.
EXECUTORS: dict[str, ExecutorTraits] = {t.name: t for t in (
    ExecutorTraits("auto", "trajscale.executors:choose_executor",
                   "serial unless the work outweighs starting processes", workers="one",
                   picks=("serial", "processes")),
    ExecutorTraits("serial", "trajscale.executors.serial:SerialExecutor", "every task in this process",
                   workers="one", convert_runner="trajscale.convert.pool:run_serial"),
    ExecutorTraits("processes", "trajscale.executors.processes:ProcessExecutor", "a local pool of worker processes",
                   job_moves="per_task", partials_move="per_task", launch="fork_server", launch_phase="pool_start",
                   starts_on_demand=True, worker_imports=_BASE, convert_runner="trajscale.convert.pool:run_processes",
                   options=(ExecutorOption("start_method", "--start-method",
                                           "how worker processes start (default: fork where safe, else forkserver)",
                                           choices=("fork", "forkserver", "spawn")),)),
    ExecutorTraits("dask", "trajscale.executors.dask:DaskExecutor",
                   "Dask distributed: a LocalCluster, a scheduler, or workers as SLURM jobs",
                   requires=("distributed",), job_moves="per_worker", partials_move="per_task", launch="nanny",
                   launch_phase="pool_start", worker_imports=f"import distributed; {_BASE}",
                   convert_runner="trajscale.convert.pool:run_dask",
                   options=(
                       ExecutorOption("scheduler", "--scheduler", "Dask scheduler address (tcp://host:port)",
                                      metavar="ADDRESS"),
                       ExecutorOption("scheduler_timeout", "--scheduler-timeout",
                                      "seconds to wait for --scheduler before giving up (default 10)", kind="float",
                                      metavar="SECONDS"),
                       ExecutorOption("cluster", "--dask-cluster",
                                      "local (default): a LocalCluster here; slurm: workers as SLURM jobs "
                                      "(dask-jobqueue)", choices=("local", "slurm")),
                       ExecutorOption("jobs", "--dask-jobs", f"{_SLURM} to submit (default: enough for -n)",
                                      kind="int", metavar="N"),
                       ExecutorOption("cores", "--dask-cores",
                                      "cores of each SLURM job, one single-threaded worker each (default 1)",
                                      kind="int", metavar="N"),
                       ExecutorOption("memory", "--dask-memory", "memory of each SLURM job (e.g. 4GB)", metavar="SIZE"),
                       ExecutorOption("walltime", "--dask-walltime", "time limit of each SLURM job",
                                      metavar="HH:MM:SS"),
                       ExecutorOption("queue", "--dask-queue", "SLURM partition of the jobs", metavar="PARTITION"),
                       ExecutorOption("job_extra", "--dask-job-extra",
                                      "one more #SBATCH directive of the jobs (repeat for several)", kind="list",
                                      metavar="DIRECTIVE"),
                       ExecutorOption("wait", "--dask-wait",
                                      "seconds to wait for the SLURM jobs' workers (default: as long as the queue "
                                      "takes)", kind="float", metavar="SECONDS"),
                   )),
    ExecutorTraits("mpi", "trajscale.executors.mpi:MPIExecutor", "the ranks of mpiexec -n N trajscale ...",
                   requires=("mpi4py",), workers="launcher", job_moves="tree", partials_move="per_worker",
                   launch="every_rank", launch_phase="mpi_init", collective_open=True, polls_while_waiting=True,
                   worker_imports=f"from mpi4py import MPI; {_BASE}", convert_runner="trajscale.convert.pool:run_mpi",
                   options=(ExecutorOption("collective", "--collective", "collective MPI-IO reads", kind="flag"),
                            ExecutorOption("driver", "--driver",
                                           "HDF5 driver on MPI ranks (default: mpio where h5py has MPI)",
                                           choices=("mpio", "default"), values=(("default", None),)))),
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
    """The executor whose workers are the ranks of an MPI launcher (``mpiexec``'s default)."""
    return names(workers=("launcher",))[0]


def names(*, workers: tuple[str, ...] = WORKER_COUNTS, predicted: bool = False, converts: bool = False,
          choosers: bool = False) -> list[str]:
    """Registered names, in order, of the executors with these traits; ``choosers``: ``auto`` too."""
    out = [t.name for t in EXECUTORS.values() if not t.chooses and t.workers in workers
           and (t.predicted or not predicted) and (t.convert_runner is not None or not converts)]
    if choosers:
        out = [t.name for t in EXECUTORS.values() if t.chooses and set(t.picks) & set(out)] + out
    return out


def home_names() -> list[str]:
    """The executors whose tasks' results come home to this process, which writes them (``pack``)."""
    return names(workers=("one", "n_workers"), converts=True, choosers=True)


def options_of(name: str) -> tuple[ExecutorOption, ...]:
    """The options of executor ``name``; of a chooser, those of its picks."""
    traits = executor_traits(name)
    if traits.chooses:
        return tuple(o for pick in traits.picks for o in EXECUTORS[pick].options)
    return traits.options


def all_options(among: list[str] | None = None) -> dict[str, tuple[ExecutorOption, list[str]]]:
    """flag -> (its option, the executors that take it), over ``among`` (default: every executor)."""
    out: dict[str, tuple[ExecutorOption, list[str]]] = {}
    for name in among if among is not None else list(EXECUTORS):
        for opt in EXECUTORS[name].options:
            out.setdefault(opt.flag, (opt, []))[1].append(name)
    return out


def register(traits: ExecutorTraits) -> ExecutorTraits:
    """Add (or replace) an executor's entry, e.g. a plugin's or a test's; the CLI built after sees it."""
    EXECUTORS[traits.name] = traits
    return traits


@dataclass(frozen=True, slots=True)
class WorkSize:
    """What ``auto`` weighs of work that is not an analysis: :class:`~trajscale.runspec.JobFacts`'s fields."""

    n_frames: int
    n_atoms: int
    span_atoms: int | None = None
    decode_s_per_frame: float = 0.0
    cost: None = None   # copying is linear in the atoms
    #: the input's bytes come over a network (its Source reads ahead): more processes do not fetch faster
    reads_ahead: bool = False


def choose(executor: str, size, n_workers: int | None = None) -> tuple[str, str]:
    """``(name, why)``: ``executor``, or a chooser's choice for work of ``size`` (:class:`WorkSize` or a
    :class:`~trajscale.runspec.JobFacts`): the one rule of ``run``, ``convert``, ``rechunk`` and ``pack``."""
    traits = executor_traits(executor)
    if not traits.chooses:
        return executor, "asked for"
    return load(traits.entry)(size, n_workers)


__all__ = ["DEFAULT_PREDICTION", "EXECUTORS", "ExecutorOption", "ExecutorTraits", "WorkSize", "all_options", "choose",
           "executor_traits", "home_names", "launcher_executor", "load", "names", "options_of", "predicted_traits",
           "register"]
