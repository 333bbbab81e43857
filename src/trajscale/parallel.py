"""What parallel machinery is available: MPI, parallel HDF5, Dask."""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from pathlib import Path

from .errors import ParallelUnavailableError

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
            if launched_world() is not None:   # check_mpi_world says it in one line, naming the launcher
                warnings.filterwarnings("ignore", message="suspicious MPI execution environment")
            from mpi4py import MPI
    except ImportError:
        raise ParallelUnavailableError("the MPI executor needs mpi4py (pip install trajscale[mpi])") from None
    if first:   # importing mpi4py.MPI initialises MPI: the report's "MPI init" phase
        from .report.process import note_phase

        note_phase("mpi_init", time.perf_counter() - t0)
    return MPI.COMM_WORLD


#: Environment variables that MPI launchers set in every process they start:
#: (world size, rank, launcher name).  Under SLURM only srun's step variables
#: count (a batch script's SLURM_NTASKS describes the allocation, not this process).
#: A PMIx launcher sets no size: a PMIX_RANK above 0 is the evidence there.
_LAUNCHER_ENV = (
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "Open MPI's mpirun"),
    ("PMI_SIZE", "PMI_RANK", "an MPICH-style mpiexec (PMI)"),
    ("SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "srun"),
    (None, "PMIX_RANK", "a PMIx launcher"),
)


def launched_world() -> tuple[int | None, int, str] | None:
    """``(size, rank, launcher)`` when a launcher started this process as one of several, else None.

    ``size`` is None where the launcher does not say it (PMIx).
    """
    def number(var):
        try:
            return int(os.environ.get(var, "")) if var else None
        except ValueError:
            return None

    for size_var, rank_var, who in _LAUNCHER_ENV:
        size, rank = number(size_var), number(rank_var) or 0
        if (size is not None and size > 1) or (size_var is None and rank > 0):
            return size, rank, who
    return None


def recorded_launcher() -> str:
    """The launcher that goes with this environment's mpi4py (e.g. ``mpiexec.mpich``).

    ``scripts/setup-env.sh`` records it in ``<venv>/share/trajscale/launcher``;
    without that file it is guessed from the MPI library mpi4py was built with.
    """
    try:
        return Path(sys.prefix, "share", "trajscale", "launcher").read_text().strip() or "mpiexec"
    except OSError:
        pass
    try:
        from mpi4py import MPI

        library = MPI.Get_library_version()
    except Exception:   # noqa: BLE001 - no mpi4py: nothing better to say
        return "mpiexec"
    for marker, exe in (("MPICH", "mpiexec.mpich"), ("Open MPI", "mpiexec.openmpi")):
        if marker in library and _which(exe):
            return exe
    return "mpiexec"


def check_mpi_world(size: int) -> None:
    """Refuse an MPI world of one process started by a launcher that started several.

    That happens when ``mpiexec`` belongs to another MPI than mpi4py's (e.g.
    Open MPI's, after a package switched the alternatives): every process then
    runs the whole job alone and they all write the same outputs.
    """
    from .errors import ConfigError

    world = launched_world()
    if size == 1 and world is not None:
        n, _, who = world
        raise ConfigError(
            f"{who} started {n or 'several'} processes, but mpi4py's MPI sees each as a world of 1: the "
            f"launcher belongs to another MPI. Use '{recorded_launcher()} -n {n or 'N'} ...', the "
            "launcher of the MPI that mpi4py and h5py were built with")


def check_not_launched(executor: str) -> None:
    """Refuse a non-MPI run started as one of several processes by an MPI launcher.

    Each process would run the whole job and write the same outputs.  Only rank
    0's error is printed (the others are marked as reported elsewhere).
    """
    from .errors import ConfigError

    world = launched_world()
    if world is None:
        return
    n, rank, who = world
    exc = ConfigError(f"started by {who} as {n or 'several'} processes, but the {executor} executor "
                      "runs the whole job in every process (identical runs writing the same outputs): "
                      "use --executor mpi (executor='mpi'), or run without the launcher")
    exc.reported_elsewhere = rank != 0
    raise exc


def _which(exe: str) -> str | None:
    import shutil  # (with bz2 and lzma): only when an MPI launcher is looked for

    return shutil.which(exe)
