"""What parallel machinery is available: MPI, parallel HDF5, Dask."""

from __future__ import annotations

import functools
import logging
import signal
import sys
import threading
import time
from contextlib import contextmanager

from .errors import ParallelUnavailableError
from .launch import current as current_launch
from .launch import recorded_launcher

log = logging.getLogger(__name__)


@functools.cache
def h5py_has_mpi() -> bool:
    """True when h5py was built against parallel HDF5 (``driver="mpio"`` works)."""
    import h5py

    return bool(h5py.get_config().mpi)


@functools.cache
def _warn_serial_once() -> None:
    log.warning("h5py is built without MPI: MPI-IO paths (driver='mpio', collective writes) are "
                "unavailable; ranks will open files with HDF5's default driver instead. Run "
                "'make env' to build h5py against parallel HDF5.")


def require_parallel_h5py() -> None:
    """Raise a clear error if parallel HDF5 is missing."""
    if not h5py_has_mpi():
        raise ParallelUnavailableError(
            "this h5py is built without MPI, so driver='mpio' is unavailable; "
            "build h5py against parallel HDF5 (see README) or use the default driver")


def default_mpi_driver() -> str | None:
    """``"mpio"`` where parallel HDF5 is available, else None (and say so once)."""
    if h5py_has_mpi():
        return "mpio"
    _warn_serial_once()
    return None


def mpi_comm_world():
    """COMM_WORLD, or a clear error if mpi4py is missing."""
    import warnings

    first = "mpi4py.MPI" not in sys.modules
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            if current_launch().several:   # check_mpi_world says it in one line, naming the launcher
                warnings.filterwarnings("ignore", message="suspicious MPI execution environment")
            from mpi4py import MPI
    except ImportError:
        raise ParallelUnavailableError("the MPI executor needs mpi4py (pip install trajscale[mpi])") from None
    if first:   # importing mpi4py.MPI initialises MPI: the report's "MPI init" phase
        from .timeline import note_phase

        note_phase("mpi_init", time.perf_counter() - t0)
    return MPI.COMM_WORLD


def check_mpi_world(size: int) -> None:
    """Refuse an MPI world of one process started by a launcher that started several (an ``mpiexec`` of
    another MPI than mpi4py's, ``srun --mpi=none``): each would run the whole job and write the same outputs."""
    from .errors import ConfigError

    launch = current_launch()
    if size != 1 or not launch.several:
        return
    if launch.independent:
        exc = ConfigError(launch.refusal("the whole job"))
        exc.reported_elsewhere = launch.rank != 0   # one line for the job, from rank 0
        raise exc
    n = launch.size or "several"
    if launch.launcher == "srun":
        use = (f"start it with the srun --mpi plugin of the MPI that mpi4py and h5py were built with "
               f"(srun --mpi=list lists them), or with that MPI's launcher '{recorded_launcher()} -n {n} ...'")
    else:
        use = f"use '{launch.fix()} ...', the launcher of the MPI that mpi4py and h5py were built with"
    raise ConfigError(f"{launch.who} started {n} processes, but mpi4py's MPI sees each as a world of 1: the "
                      f"launcher belongs to another MPI; {use}")


def check_not_launched(executor: str) -> None:
    """Refuse a non-MPI run started as one of several processes by a launcher; only rank 0 prints the error."""
    from .errors import ConfigError

    launch = current_launch()
    if not launch.several:
        return
    if launch.independent:
        exc = ConfigError(launch.refusal())
    else:
        exc = ConfigError(f"started by {launch.who} as {launch.size or 'several'} processes, but the {executor} "
                          "executor runs the whole job in every process (identical runs writing the same "
                          "outputs): use --executor mpi (executor='mpi'), or run without the launcher")
    exc.reported_elsewhere = launch.rank != 0
    raise exc


def when_all_arrive(comm, collective, *args, **kwargs):
    """``collective(*args, **kwargs)`` of ``comm`` once every rank has reached it, each having waited asleep.

    MPICH's blocking collectives spin while they wait, taking a core from the ranks still working; a
    non-blocking barrier polled with sleeps growing from 0.5 ms to 20 ms costs at most 20 ms.  A stop
    signal landing meanwhile is acted on once the collective has returned: no rank leaves the others in it."""
    if comm is None or comm.Get_size() == 1 or threading.current_thread() is not threading.main_thread():
        return collective(*args, **kwargs)
    with _stop_signals_held():
        wait_asleep(comm.Ibarrier().Test)
        return collective(*args, **kwargs)


def wait_asleep(ready, between=None, longest: float = 0.02) -> None:
    """Until ``ready()``, sleep between looks (0.5 ms doubling to ``longest``), calling ``between()``: no spinning."""
    delay = 0.0005
    while not ready():
        if between is not None:
            between()
        time.sleep(delay)
        delay = min(2 * delay, longest)


@contextmanager
def _stop_signals_held():
    """SIGINT and SIGTERM recorded inside, and raised again as the block ends (their handlers then run)."""
    stops = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.getsignal(s) for s in stops}
    if any(h is None for h in before.values()):   # a handler Python did not install cannot be put back
        yield
        return
    held: list[int] = []
    for s in stops:
        signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        for signum in held:
            signal.raise_signal(signum)
