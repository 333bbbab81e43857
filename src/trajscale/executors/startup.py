"""Starting worker processes from scripts, stdin and notebooks, quietly and fast.

Three things users meet before any task runs:

* ``spawn`` and ``forkserver`` children re-import the parent's ``__main__``: a
  script that calls ``trajscale.run`` at its top level (no ``if __name__ ==
  "__main__":`` guard) runs again in every worker, and a script read from stdin
  cannot be re-imported at all (``FileNotFoundError: <stdin>``).  trajscale's
  workers run only trajscale's code, so :func:`main_not_reimported` hides the
  main module while workers start.
* ``fork`` starts a worker in milliseconds with everything already imported,
  but is unsafe when other threads run (a lock held at the fork stays held in
  the child): :func:`fork_is_safe` says when it is not.
* Ctrl-C reaches every process of the terminal's process group: a worker (or
  forkserver) that is still importing prints a ``KeyboardInterrupt``
  traceback.  :func:`sigint_blocked` keeps SIGINT pending while workers start
  (children inherit the blocked mask) and :func:`quiet_worker` makes them ignore
  it; the parent alone receives it and stops the pool.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading

from ..util import main_not_reimported  # noqa: F401 (the executors' name for it)

log = logging.getLogger(__name__)


def fork_is_safe() -> bool:
    """True when this process can fork workers: a POSIX fork, no other thread, no MPI."""
    if not hasattr(os, "fork") or sys.platform == "darwin":   # macOS frameworks are not fork-safe
        return False
    if threading.active_count() > 1:
        return False
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        return not (mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized())
    except Exception:   # noqa: BLE001 - a broken MPI is one more reason not to fork
        return False


@contextlib.contextmanager
def sigint_blocked():
    """SIGINT held pending in this thread while workers start; delivered when the block ends.

    Children started in the block inherit the blocked mask (across exec too,
    so a forkserver's imports cannot be interrupted), and :func:`quiet_worker`
    then ignores the signal before unblocking it.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def quiet_worker() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (it stops the pool)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def warm_up() -> int:
    """First task of a new worker: load the compiled kernels now, not inside a timed task."""
    from ..kernels.superpose import preload_kernels

    preload_kernels()
    return os.getpid()
