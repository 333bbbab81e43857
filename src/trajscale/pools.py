"""Local worker processes: how they start, how they are stopped, how a caller waits on them.

The one place that makes a pool of local worker processes (:func:`process_pool`), below the analysis executors and
convert's task runners.  ``spawn`` and ``forkserver`` children re-import the parent's ``__main__``
(:func:`~trajscale.util.main_not_reimported` hides it); ``fork`` is fast but unsafe with other threads or MPI
(:func:`fork_is_safe`); a Ctrl-C reaches every process of the terminal's group, so :func:`sigint_blocked` holds
it while workers start and :func:`quiet_worker` leaves it to the parent, which stops the pool."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, wait

from .errors import ConfigError
from .util import main_not_reimported, raise_if_stopped

__all__ = ["as_completed_polling", "check_start_method", "choose_start_method", "die_with_parent", "fork_is_safe",
           "fork_refusal", "holds_unforkable", "main_not_reimported", "parent_alive", "prepare_start", "process_pool",
           "quiet_worker", "sigint_blocked", "stop_workers", "worker_context"]


def fork_is_safe() -> bool:
    """True when the default is to fork workers now: no :func:`fork_refusal` and no :func:`holds_unforkable`."""
    return fork_refusal() is None and holds_unforkable() is None


#: Threads whose owner makes them safe across a fork: a multiprocessing queue's feeder (left behind by a
#: DataLoader epoch) holds only the queue's own locks, which a forked child replaces (``Queue._after_fork``).
#: Counting them would flip a loader's next epoch to forkserver, re-running an unguarded script in every worker.
_RESET_IN_CHILD = frozenset({"QueueFeederThread"})


def fork_refusal() -> str | None:
    """Why this process, as it is now, must not fork a worker even when asked to, or None.

    Judged from the process's live state: no POSIX fork (or macOS), another thread running (a lock it holds would
    stay held in the child), MPI initialised, a URL client's runtime, an HDF5 file open for writing.  A file open
    for reading only is no reason to refuse, but the default does not fork then (:func:`fork_is_safe`)."""
    if not hasattr(os, "fork"):
        return "this platform has no fork"
    if sys.platform == "darwin":
        return "macOS's system frameworks are not fork-safe"
    _stop_progress_monitors()
    others = [t.name for t in threading.enumerate()
              if t is not threading.current_thread() and t.name not in _RESET_IN_CHILD]
    if others:
        n = len(others)
        return f"{n} other thread{'s' if n > 1 else ''} run{'' if n > 1 else 's'} here ({', '.join(others[:3])})"
    held = holds_unforkable(writing_only=True)
    if held is not None:
        return f"this process holds {held}"
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            return "MPI is initialised here"
    except Exception:   # noqa: BLE001 - a broken MPI is one more reason not to fork
        return "MPI is in an unknown state here"
    return None


def _runtime_threads() -> bool | None:
    """True when a thread Python did not start waits on network events (``epoll``): an async runtime's, such
    as obstore's tokio.  None where this cannot be told.  A native thread running at the moment is looked
    at again, a few times, a millisecond apart."""
    import time

    for _ in range(3):
        python = {t.native_id for t in threading.enumerate()}
        try:
            tasks = [t for t in os.listdir("/proc/self/task") if int(t) not in python]
        except OSError:
            return None
        running = False
        for t in tasks:
            try:
                with open(f"/proc/self/task/{t}/stat") as fh:
                    state = fh.read().rsplit(")", 1)[1].split()[0]
                with open(f"/proc/self/task/{t}/wchan") as fh:
                    wchan = fh.read().strip()
            except (OSError, IndexError):   # the thread ended meanwhile
                continue
            if "epoll" in wchan or wchan == "ep_poll":
                return True
            if state == "R":
                running = True
            elif wchan in ("", "0"):   # sleeping, where the kernel hides where
                return None
        if not running:
            return False
        time.sleep(0.001)
    return None


def holds_unforkable(writing_only: bool = False) -> str | None:
    """What this process holds that a forked child cannot use, or None: an open HDF5 file (shared descriptor
    and state), a URL client's runtime (its threads are not Python's: a forked child's client crashes or
    hangs), looked for whoever started it.  ``writing_only``: HDF5 files open for writing only."""
    held = []   # every reason, not the first: a user told of one fixes it and meets the next
    h5f = getattr(sys.modules.get("h5py"), "h5f", None)
    if h5f is not None and h5f.get_obj_count(h5f.OBJ_ALL, h5f.OBJ_FILE):
        if not writing_only:
            held.append("an open HDF5 file")
        elif any(f.get_intent() != h5f.ACC_RDONLY for f in h5f.get_obj_ids(h5f.OBJ_ALL, h5f.OBJ_FILE)):
            held.append("an HDF5 file open for writing")
    storage = sys.modules.get("trajscale.storage")
    if (storage is not None and storage.fetched_here()["requests"]) or \
            ("obstore" in sys.modules and _runtime_threads() is not False):
        held.append("a URL client's runtime")
    return " and ".join(held) or None


def choose_start_method(requested: str | None = None, *, late: bool = False, unforkable: str | None = None,
                        asked_by: str = "start_method") -> str:
    """How the workers of a pool started now start: the one rule for every worker process trajscale makes.

    ``requested`` (``asked_by`` names where it was asked, for the refusal), else ``$TRAJSCALE_START_METHOD``, else
    fork where :func:`fork_refusal` finds no reason not to, else forkserver (spawn where there is none).  ``late``:
    the job is prepared, and a forkserver serves it more cheaply: not forked unless asked for.  ``unforkable``: why
    forking will be unsafe when the workers start (a Dask event loop's thread).  An explicit ``fork`` where it is
    unsafe is refused in one line, not obeyed."""
    method = requested or os.environ.get("TRAJSCALE_START_METHOD") or None
    if method is not None:
        check_start_method(method, asked_by if requested else "TRAJSCALE_START_METHOD")
        if method == "fork":
            why = unforkable or fork_refusal()
            if why is not None:
                named = f"{asked_by}='fork'" if requested else "TRAJSCALE_START_METHOD=fork"
                raise ConfigError(f"{named} refused: {why} (a forked worker could crash or hang); "
                                  f"choose {_not_fork()}, or leave the start method unset")
        return method
    if not late and unforkable is None and "fork" in mp.get_all_start_methods() and fork_is_safe():
        return "fork"
    return _not_fork()


def _stop_progress_monitors() -> None:
    """End tqdm's monitor thread: another library's bar leaves it sleeping, and a running thread rules fork out."""
    tmonitor = getattr(sys.modules.get("tqdm._monitor"), "TMonitor", None)
    if tmonitor is None:
        return
    for t in threading.enumerate():
        if isinstance(t, tmonitor) and t is not threading.current_thread():
            with contextlib.suppress(Exception):   # (a monitor that cannot be ended is a thread like any)
                t.exit()


def check_start_method(method: str, asked_by: str = "start method") -> None:
    """Refuse, in one line, a start method this platform does not have (its safety is judged at the start)."""
    methods = mp.get_all_start_methods()
    if method not in methods:
        raise ConfigError(f"{asked_by} {method!r} is not available here; choose one of {', '.join(methods)}")


def _not_fork() -> str:
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def prepare_start(requested: str | None = None, **rule) -> str:
    """:func:`choose_start_method`'s answer (``rule``: its keywords) for workers about to start, made ready: a
    forkserver's socket goes in this process's own folder, not multiprocessing's ``pymp-*`` that only a clean exit
    removes (a killed parent's stays for ever; ours the next run removes), where a socket's 107 bytes allow.  Only
    a starter calls it: a caller that only asks which method would be used makes no folder."""
    import tempfile

    from .util import TASKS_PREFIX, process_folder

    method = choose_start_method(requested, **rule)
    config = getattr(mp.current_process(), "_config", None)   # (where multiprocessing.util.get_temp_dir looks)
    socket = f"{tempfile.gettempdir()}/{TASKS_PREFIX}{os.getpid()}-12345678/listener-12345678"
    if method == "forkserver" and isinstance(config, dict) and config.get("tempdir") is None \
            and len(os.fsencode(socket)) < 108:
        config["tempdir"] = process_folder()
    return method


def worker_context(requested: str | None = None):
    """A ``multiprocessing`` context whose processes start by :func:`choose_start_method`'s rule, judged now: for
    the workers that are not a pool's (the probe's readers), so no module picks a start method of its own."""
    return mp.get_context(prepare_start(requested))


@contextlib.contextmanager
def process_pool(n_workers: int, *, start_method: str | None = None, initializer=None, initargs: tuple = (),
                 preload: tuple[str, ...] = ()):
    """A ``ProcessPoolExecutor`` of ``n_workers`` local worker processes: the only place one is made.

    Yields ``(pool, start_method)`` while its workers start, SIGINT held and the main module hidden; submit the
    first tasks inside the block (a forked pool starts its workers on submit).  The caller shuts the pool down.  A
    forkserver imports ``preload`` once; ``initializer`` is :func:`quiet_worker` or one that calls it."""
    from concurrent.futures import ProcessPoolExecutor

    ctx = worker_context(start_method)
    method = ctx.get_start_method()
    if method == "forkserver":
        if preload:
            ctx.set_forkserver_preload(list(preload))
        # a forkserver outlives this pool: its workers would see the environment as it was (credentials set since)
        initializer, initargs = _in_environment, (dict(os.environ), initializer, initargs)
    with sigint_blocked(), main_not_reimported():
        pool = ProcessPoolExecutor(max_workers=max(1, int(n_workers)), mp_context=ctx, initializer=initializer,
                                   initargs=initargs)
        yield pool, method


def _in_environment(env: dict, initializer, initargs: tuple) -> None:
    """Worker initializer: the parent's environment as it was when the pool started, then ``initializer``."""
    if dict(os.environ) != env:
        os.environ.clear()
        os.environ.update(env)
    if initializer is not None:
        initializer(*initargs)


@contextlib.contextmanager
def sigint_blocked():
    """SIGINT held pending in this thread while workers start; forked children inherit the blocked mask
    (a forkserver, started by fork+exec, does not) and :func:`quiet_worker` ignores it before unblocking."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def quiet_worker() -> None:
    """Worker initializer: Ctrl-C is the parent's while it lives; the worker dies with its parent."""
    die_with_parent()
    signal.signal(signal.SIGINT, _sigint_in_worker)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _sigint_in_worker(signum, frame) -> None:
    """Ctrl-C reaches the whole group and the parent stops the pool; a worker whose parent is gone ends here."""
    if not parent_alive():
        os._exit(128 + signum)


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Make this worker die (SIGKILL) when the process that started it dies, whatever killed it.

    On Linux the kernel sends it (``PR_SET_PDEATHSIG``), so a worker never writes to an output after its
    parent is gone nor waits for tasks that will not come.  Under a forkserver the kernel's parent is the
    forkserver, which outlives the main process: there a thread watches the main process's sentinel pipe."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):   # no prctl here: the checks below still apply
            pass
    if not parent_alive():
        os._exit(1)
    parent = mp.parent_process()
    if parent is not None and parent.pid != os.getppid() and parent.sentinel is not None:
        threading.Thread(target=_kill_self_when_closed, args=(parent.sentinel,), daemon=True,
                         name="trajscale-parent-watch").start()


def _kill_self_when_closed(fd: int) -> None:
    import select

    while True:
        try:
            select.select([fd], [], [])
            break
        except InterruptedError:
            continue
        except (OSError, ValueError):   # the descriptor is gone: nothing left to watch
            return
    os.kill(os.getpid(), signal.SIGKILL)


def parent_alive() -> bool:
    """True while the process that started this one (multiprocessing's parent) is alive."""
    parent = mp.parent_process()
    if parent is None:
        return True
    try:
        os.kill(parent.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return os.getppid() != 1 or parent.pid == 1


def as_completed_polling(futures, every: Callable[[], None] | None = None):
    """``as_completed``, waking every 0.1 s to act on a recorded stop signal and to call ``every()``."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
        raise_if_stopped()
        if every is not None:
            every()
        yield from done


def stop_workers(pool, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to every live worker of a ``ProcessPoolExecutor`` (which has no public handle on them)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            if proc.is_alive():
                os.kill(proc.pid, sig)
        except (ProcessLookupError, AttributeError, ValueError):
            pass
