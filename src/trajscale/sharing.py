"""The root prepares, then shares: one protocol for every SPMD step of trajscale (a run's job, a conversion's
record and offsets, a rechunk's join), for any group with ``is_root``, ``spmd`` and ``broadcast(obj)``:

* the value ``make()`` returns on the root is returned on every process;
* a trajscale error on the root is raised on every process, printed once (``reported_elsewhere``);
* a Ctrl-C or SIGTERM on the root is raised as itself on every process (an interrupted run);
* any other exception keeps its traceback on the root, and is one ``RuntimeError`` naming the step elsewhere.

Before its first share the root owes the others one (they may already wait in it): :func:`owe_first_share`
records that, and :func:`share_interruption` hands on an interruption that ends the root while it owes one."""

from __future__ import annotations

from collections.abc import Callable

from .errors import TrajscaleError

__all__ = ["CommGroup", "owe_first_share", "share", "share_interruption", "share_on_comm", "share_settled"]

#: The groups whose root owes the next share (this process their root): the others may wait in it.
_owed: list = []


class CommGroup:
    """An mpi4py communicator seen as a sharing group: its rank 0 is the root."""

    def __init__(self, comm) -> None:
        self.comm = comm
        self.is_root = comm is None or comm.Get_rank() == 0
        self.spmd = comm is not None and comm.Get_size() > 1

    def broadcast(self, obj):
        from .parallel import when_all_arrive

        return obj if self.comm is None else when_all_arrive(self.comm, self.comm.bcast, obj, root=0)


def share(group, make: Callable[[], object], what: str, then_share: bool = False):
    """``make()`` run on the root, its value handed to every process; ``then_share``: the root owes the next share."""
    got = None
    if group.is_root:
        share_settled(group)
        try:
            got = make()
        except BaseException as exc:
            if group.spmd:
                group.broadcast(exc if isinstance(exc, TrajscaleError | KeyboardInterrupt | SystemExit)
                                else RuntimeError(f"rank 0 failed to {what}: {exc!r}"))
            raise
    got = group.broadcast(got)
    if then_share and group.is_root and group.spmd:
        _owe(group)
    if isinstance(got, BaseException):
        if isinstance(got, TrajscaleError):
            got.reported_elsewhere = True
        raise got
    return got


def share_on_comm(comm, make: Callable[[], object], what: str = "prepare", then_share: bool = False):
    """:func:`share` over an mpi4py communicator (``None``: this process alone)."""
    return share(CommGroup(comm), make, what, then_share)


def owe_first_share(group) -> None:
    """On an SPMD group's root, when the group is made: an interruption before its first share is shared instead."""
    if not hasattr(group, "broadcast"):
        group = CommGroup(group)
    if group.is_root and group.spmd:
        _owe(group)


def _owe(group) -> None:
    """The root owes ``group``'s next share (once per communicator: its processes wait in one broadcast)."""
    share_settled(group)
    _owed.append(group)


def share_interruption(exc: BaseException) -> None:
    """The root ends on a stop signal while it owes a share: handed to the processes waiting in it."""
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        while _owed:
            _owed.pop().broadcast(exc)
    else:
        _owed.clear()


def share_settled(group) -> None:
    """``group``'s root shares now, or its processes meet in collectives of their own: it owes nothing more."""
    comm = getattr(group, "comm", group)
    _owed[:] = [g for g in _owed if g is not group and getattr(g, "comm", g) is not comm]
