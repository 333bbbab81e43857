"""Executors: where an analysis's tasks run; their names and traits are :data:`EXECUTORS`."""

from __future__ import annotations

from .._lazy import attach
from ..errors import ConfigError
from ..executor_registry import EXECUTORS, executor_traits, load

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from ..analysis.base import FrameCost
    from .base import Executor

    class JobSize(Protocol):
        """What ``executor="auto"`` weighs (:class:`~trajscale.runspec.JobFacts` has it)."""

        n_frames: int
        n_atoms: int
        span_atoms: int | None
        decode_s_per_frame: float
        #: The analysis's declared work per frame (None: linear in ``n_atoms``).
        cost: FrameCost | None
        #: The source fetches its bytes over a network (it reads ahead): more processes do not read faster.
        reads_ahead: bool

# Imported on first use: a pool worker importing :mod:`.startup` does not import the task machinery with it.
__getattr__, __dir__ = attach(__name__, {"Executor": ".base", "Job": ".base", "TaskResults": ".base",
                                         "run_task": ".base"},
                              submodules=("base",))

#: Seconds to start a pool of worker processes, by start method (docs/benchmarks.md);
#: ``auto`` runs serially unless the work saved by the workers exceeds it.
START_COST_S = {"fork": 0.1, "forkserver": 1.5, "spawn": 2.5}
#: Serial cost model of a task: seconds per byte of the atom span read, per atom-frame mapped, and per
#: pair an analysis declares (:class:`~trajscale.analysis.base.FrameCost`).
READ_S_PER_BYTE = 1 / 3e9
MAP_S_PER_ATOM_FRAME = 4e-9
MAP_S_PER_PAIR = 6e-9


#: Most seconds of compute a block of frames is planned to take: a task acts on a stop signal between
#: its blocks (:func:`~.base.run_task`), so this bounds how long SIGTERM or Ctrl-C waits inside a task.
BLOCK_COMPUTE_S = 0.25


def block_frames_for(frames: int, cost: FrameCost | None, decode_s_per_frame: float = 0.0) -> int:
    """``frames``, fewer where the analysis's declared work would make a block compute for longer than
    :data:`BLOCK_COMPUTE_S` (a stop signal is acted on between blocks); at least one."""
    if cost is None:
        return max(1, int(frames))
    per_frame = cost.atoms * MAP_S_PER_ATOM_FRAME + cost.pairs * MAP_S_PER_PAIR + decode_s_per_frame
    if per_frame <= 0:
        return max(1, int(frames))
    return max(1, min(int(frames), int(BLOCK_COMPUTE_S / per_frame)))


def late_start_method(requested: str | None = None) -> str:
    """How a pool started *after* this process prepared a job starts its workers (not forked unless asked for)."""
    from ..pools import choose_start_method

    return choose_start_method(requested, late=True)


def estimate_seconds(job: JobSize) -> tuple[float, float]:
    """``(read, compute)``: rough serial seconds of reading the job's frames and of mapping them."""
    span = job.n_atoms if job.span_atoms is None else max(job.span_atoms, job.n_atoms)
    read = job.n_frames * span * 12 * READ_S_PER_BYTE
    cost = job.cost
    per_frame = (job.n_atoms * MAP_S_PER_ATOM_FRAME if cost is None
                 else cost.atoms * MAP_S_PER_ATOM_FRAME + cost.pairs * MAP_S_PER_PAIR)
    return read, job.n_frames * (per_frame + job.decode_s_per_frame)


def choose_executor(job: JobSize, n_workers: int | None = None) -> tuple[str, str]:
    """``(name, why)`` for ``executor="auto"``: the lighter of its ``picks`` (serial) unless the heavier's workers
    (a process pool) save more than they take to start.

    The work is the analysis's declared ``frame_cost``, its decoding, and reading its bytes; bytes fetched over a
    network come no faster from more processes, so there only the compute is shared work.  The pool starts after the
    choice, so not by fork (:func:`late_start_method`): its start is weighed at a forkserver's cost."""
    import os

    light, heavy = executor_traits("auto").picks
    n = n_workers or os.cpu_count() or 1
    read, compute = estimate_seconds(job)
    shared = compute if job.reads_ahead else read + compute
    work = read + compute
    what = f"estimated work {work:.2g} s" + (f" ({compute:.2g} s of compute; reading over the network is "
                                             "not shared by workers)" if job.reads_ahead else "")
    if n < 2:
        return light, f"{n} CPU: no parallel speed-up to gain"
    saved = shared * (1 - 1 / n)
    cheapest = min(START_COST_S["forkserver"], START_COST_S["spawn"])
    if saved <= cheapest:   # serial whatever the start method: multiprocessing not imported
        return light, (f"{what}; {n} workers would save {saved:.2g} s, less than the ~{cheapest:g} s it takes "
                       "to start them")
    method = late_start_method()
    start = START_COST_S.get(method, max(START_COST_S.values()))
    if saved <= start:
        return light, (f"{what}; {n} workers would save {saved:.2g} s, "
                       f"less than the ~{start:g} s it takes to start them ({method})")
    return heavy, (f"{what}; {n} workers save ~{saved:.2g} s, "
                   f"more than the ~{start:g} s it takes to start them ({method})")


def _executor_class(name: str) -> type[Executor]:
    traits = executor_traits(name)
    if traits.chooses:
        raise ConfigError(f"executor {name!r} is chosen by trajscale.run once the job's size is known; "
                          "make_executor needs a concrete one")
    return load(traits.entry)


def option_names(name: str) -> tuple[str, ...]:
    """The keyword options executor ``name`` takes besides ``n_workers`` (of ``auto``: its picks')."""
    import inspect

    traits = executor_traits(name)
    if traits.chooses:
        return tuple(dict.fromkeys(o for pick in traits.picks for o in option_names(pick)))
    params = inspect.signature(_executor_class(name)).parameters.values()
    named = tuple(p.name for p in params if p.name != "n_workers"
                  and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):   # **options: those its entry declares
        named += tuple(o.name for o in traits.options if o.name not in named)
    return named


def make_executor(name: str | Executor, n_workers: int | None = None, **kw) -> Executor:
    """Build an executor by name; unknown names and options are rejected here."""
    from .base import Executor

    if isinstance(name, Executor):
        return name
    if name in EXECUTORS and n_workers is not None and n_workers < 1:
        raise ConfigError(f"the number of workers must be at least 1 (got {n_workers})")
    klass = _executor_class(name)
    try:
        return klass(n_workers, **kw) if n_workers is not None else klass(**kw)
    except TypeError as exc:
        raise ConfigError(f"executor {name!r}: {exc}") from None


__all__ = ["EXECUTORS", "Executor", "Job", "TaskResults", "block_frames_for", "choose_executor", "estimate_seconds",
           "late_start_method", "make_executor", "option_names", "run_task"]
