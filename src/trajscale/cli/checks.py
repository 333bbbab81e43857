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


def positive_float(text: str, *, finite: bool = True) -> float:
    """argparse type: a number > 0 (and, when ``finite``, not ``inf``: a rate or a duration that is divided by)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or (finite and value == float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
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
    from ..topology import trajectory_only_format

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


def add_overwrite(p) -> None:
    """``--overwrite``: the one flag that lets a command replace an existing output (never an input)."""
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing output (an input is never written over)")


def add_output(p, help: str) -> None:
    """``-o/--output`` (required) and :func:`add_overwrite`: the output of a command that writes one."""
    p.add_argument("-o", "--output", required=True, help=help)
    add_overwrite(p)


def check_outputs(*paths: str | None, inputs=(), overwrite: bool = False) -> None:
    """Check a command's outputs before any work starts, each failing with one line: an output that is one
    of ``inputs`` (same device and inode; a segment index's parts too) even with ``overwrite``, two outputs of
    one name, a missing folder, an existing file without ``overwrite``."""
    import os

    from ..errors import OutputError
    from ..sources import with_parts
    from ..util import check_output_path

    inputs = with_parts(inputs)
    seen: dict[str, str] = {}
    for p in paths:
        if not p:
            continue
        key = os.path.realpath(p)
        if key in seen:
            raise OutputError(p, f"is given twice as an output (also as {seen[key]}): give each output its own name")
        seen[key] = p
        check_output_path(p, overwrite=overwrite, inputs=inputs)
