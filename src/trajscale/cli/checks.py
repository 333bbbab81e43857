"""Argument checks shared by the commands: done before any work, each failing with one clear line."""

from __future__ import annotations

import argparse

#: The insisting flag that lets a trajectory-only file stand as the topology.
TRAJECTORY_AS_TOPOLOGY = "--trajectory-as-topology"


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``-n 0`` or ``--tasks -3`` is a usage error, not a run)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_topology(p, what: str = "topology file with atom names (TPR, PSF, GRO, PDB, ...)") -> None:
    """The topology positional and the flag that accepts a trajectory-only file as one."""
    p.add_argument("topology", help=what)
    p.add_argument(TRAJECTORY_AS_TOPOLOGY, action="store_true",
                   help="accept a trajectory-only file (XTC, TRR, DCD, NetCDF, H5MD) as the topology: "
                        "its atoms then have no names, residues or masses (an H5MD file that stores them, "
                        "as convert and ParallelWriter(topology=u) write it, is a topology without this flag)")


def check_topology(args) -> None:
    """Refuse a trajectory-only format given as the topology (arguments swapped?) unless insisted on."""
    from ..sources.mda import trajectory_only_format

    if getattr(args, "trajectory_as_topology", False):
        return
    fmt = trajectory_only_format(args.topology)
    if fmt is None:
        return
    from ..errors import InputFileError

    raise InputFileError(
        args.topology, f"{fmt} is a trajectory format, not a topology: it has no atom names, residues or masses. "
                       "Give the topology first (TPR, PSF, GRO, PDB, ...), then the trajectories; "
                       f"to use it as the topology anyway add {TRAJECTORY_AS_TOPOLOGY}")


def check_outputs(*paths: str | None, overwrite: bool = True) -> None:
    """Check output paths before the work starts (a missing folder, a file where a folder should be)."""
    from ..util import check_output_path

    for p in paths:
        if p:
            check_output_path(p, overwrite=overwrite)
