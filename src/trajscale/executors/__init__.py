"""Executors: where an analysis's tasks run.  Their names and traits are :data:`EXECUTORS`
(:mod:`trajscale.executor_registry`): one registry, read by the CLI, convert and the prediction too."""

from __future__ import annotations

from .._lazy import attach
from ..errors import ConfigError
from ..executor_registry import EXECUTORS, executor_traits, load

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from .base import Executor

    class JobSize(Protocol):
        """What ``executor="auto"`` weighs (:class:`~trajscale.runspec.JobFacts` has it)."""

        n_frames: int
        n_atoms: int
        span_atoms: int | None
        decode_s_per_frame: float

# Imported on first use: a pool worker that imports this package for its lean start-up
# module (:mod:`.startup`) does not import the task machinery (NumPy) with it.
__getattr__, __dir__ = attach(__name__, {"Executor": ".base", "Job": ".base", "TaskResults": ".base",
                                         "run_task": ".base"},
                              submodules=("base",))

#: Seconds to start a pool of worker processes, by start method (2-core VM, kernels cached);
#: ``auto`` runs serially unless the work saved by the workers exceeds it.
START_COST_S = {"fork": 0.1, "forkserver": 1.5, "spawn": 2.5}
#: Serial cost model of a task: seconds per byte of the atom span read, and per atom-frame mapped.
READ_S_PER_BYTE = 1 / 3e9
MAP_S_PER_ATOM_FRAME = 4e-9


def estimate_serial_seconds(n_frames: int, n_atoms: int, span_atoms: int | None = None) -> float:
    """Rough serial time of reading and mapping ``n_frames`` frames of ``n_atoms`` atoms."""
    span = n_atoms if span_atoms is None else max(span_atoms, n_atoms)
    return n_frames * (span * 12 * READ_S_PER_BYTE + n_atoms * MAP_S_PER_ATOM_FRAME)


def choose_executor(job: JobSize, n_workers: int | None = None) -> tuple[str, str]:
    """``(name, why)`` for ``executor="auto"``: the lighter of its registry entry's ``picks`` (serial)
    unless the heavier's workers (a process pool) save more than they take to start, from the prepared
    job's size (:class:`~trajscale.runspec.JobFacts`)."""
    import os

    light, heavy = executor_traits("auto").picks
    n = n_workers or os.cpu_count() or 1
    work = estimate_serial_seconds(job.n_frames, job.n_atoms, job.span_atoms)
    work += job.n_frames * job.decode_s_per_frame   # XTC decodes every atom of a frame
    if n < 2:
        return light, f"{n} CPU: no parallel speed-up to gain"
    saved = work * (1 - 1 / n)
    if saved <= min(START_COST_S.values()):   # serial whatever the start method: multiprocessing not imported
        return light, (f"estimated work {work:.2g} s; {n} workers would save {saved:.2g} s, less than "
                       f"the ~{min(START_COST_S.values()):g} s it takes to start them")
    from ..pools import choose_start_method

    method = choose_start_method()
    start = START_COST_S.get(method, max(START_COST_S.values()))
    if saved <= start:
        return light, (f"estimated work {work:.2g} s; {n} workers would save {saved:.2g} s, "
                       f"less than the ~{start:g} s it takes to start them ({method})")
    return heavy, (f"estimated work {work:.2g} s; {n} workers save ~{saved:.2g} s, "
                   f"more than the ~{start:g} s it takes to start them ({method})")


def _executor_class(name: str) -> type[Executor]:
    traits = executor_traits(name)
    if traits.chooses:
        raise ConfigError(f"executor {name!r} is chosen by trajscale.run once the job's size is known; "
                          "make_executor needs a concrete one")
    return load(traits.entry)


def option_names(name: str) -> tuple[str, ...]:
    """The keyword options the executor ``name`` takes besides ``n_workers`` (its class's signature;
    of ``auto``, those of its picks)."""
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


__all__ = ["EXECUTORS", "Executor", "Job", "TaskResults", "choose_executor", "make_executor", "option_names",
           "run_task"]
