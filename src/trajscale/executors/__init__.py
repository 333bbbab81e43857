"""Executors: serial, local processes, Dask distributed, MPI."""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from .base import Executor, Job, run_task

#: name -> "module:Class"; optional backends are imported only when asked for.
EXECUTORS: dict[str, str] = {
    "serial": "trajscale.executors.serial:SerialExecutor",
    "processes": "trajscale.executors.processes:ProcessExecutor",
    "dask": "trajscale.executors.dask:DaskExecutor",
    "mpi": "trajscale.executors.mpi:MPIExecutor",
}


def make_executor(name: str | Executor, n_workers: int | None = None, **kw) -> Executor:
    """Build an executor by name; unknown names and options are rejected here."""
    if isinstance(name, Executor):
        return name
    try:
        module, cls = EXECUTORS[name].split(":")
    except KeyError:
        raise ConfigError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}") from None
    if n_workers is not None and n_workers < 1:
        raise ConfigError(f"the number of workers must be at least 1 (got {n_workers})")
    klass = getattr(importlib.import_module(module), cls)
    try:
        return klass(n_workers, **kw) if n_workers is not None else klass(**kw)
    except TypeError as exc:
        raise ConfigError(f"executor {name!r}: {exc}") from None


__all__ = ["EXECUTORS", "Executor", "Job", "make_executor", "run_task"]
