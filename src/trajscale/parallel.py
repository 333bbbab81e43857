"""What parallel machinery is available: MPI, parallel HDF5, Dask."""

from __future__ import annotations

import functools
import logging

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
    try:
        from mpi4py import MPI
    except ImportError:
        raise ParallelUnavailableError("the MPI executor needs mpi4py (pip install trajscale[mpi])") from None
    return MPI.COMM_WORLD
