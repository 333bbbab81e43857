"""The root prepares, then shares: one protocol for every SPMD step of trajscale.

A run's job (:mod:`trajscale.engine`), a conversion's record and offsets, a rechunk's join
(:mod:`trajscale.convert`) are made on the root process and handed to every other one.  The
rules, in one place:

* the value ``make()`` returns on the root is returned on every process;
* a trajscale error on the root is raised on every process, printed once: the other processes'
  copies are marked ``reported_elsewhere``;
* a Ctrl-C or SIGTERM on the root (``KeyboardInterrupt``, ``SystemExit``) is raised as itself on
  every process, so each ends as an interrupted run (its partial kept), not as a crash;
* any other exception is raised with its traceback on the root, and as one ``RuntimeError`` naming
  the step (``what``) and the error on the others.

A group is anything with ``is_root``, ``spmd`` and ``broadcast(obj)``: an executor, or an
mpi4py communicator wrapped in :class:`CommGroup`.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import TrajscaleError

__all__ = ["CommGroup", "share", "share_on_comm"]


class CommGroup:
    """An mpi4py communicator seen as a sharing group: its rank 0 is the root."""

    def __init__(self, comm) -> None:
        self.comm = comm
        self.is_root = comm is None or comm.Get_rank() == 0
        self.spmd = comm is not None and comm.Get_size() > 1

    def broadcast(self, obj):
        return obj if self.comm is None else self.comm.bcast(obj, root=0)


def share(group, make: Callable[[], object], what: str):
    """``make()`` run on the root of ``group``, its value handed to every process (the module's rules)."""
    got = None
    if group.is_root:
        try:
            got = make()
        except BaseException as exc:
            if group.spmd:
                group.broadcast(exc if isinstance(exc, TrajscaleError | KeyboardInterrupt | SystemExit)
                                else RuntimeError(f"rank 0 failed to {what}: {exc!r}"))
            raise
    got = group.broadcast(got)
    if isinstance(got, BaseException):
        if isinstance(got, TrajscaleError):
            got.reported_elsewhere = True
        raise got
    return got


def share_on_comm(comm, make: Callable[[], object], what: str = "prepare"):
    """:func:`share` over an mpi4py communicator (``None``: this process alone)."""
    return share(CommGroup(comm), make, what)
