"""``trajscale probe``: measure the storage holding a path and this machine, for ``report --predict``."""

from __future__ import annotations

from ..errors import ConfigError
from .checks import add_overwrite, check_outputs, positive_float, positive_int

DESCRIPTION = """\
Measure the storage that holds PATH (a folder: a file of --bytes is written there and removed;
a file: it is read) and this machine: read bandwidth with 1, 2, 4 ... concurrent reader processes
at the block size trajscale reads, cold where the cache can be dropped (it says when it cannot),
open and stat latency, and the start of one fresh worker of each executor. Bounded by --seconds
and --bytes. Under `mpiexec -n K` (several nodes) every rank reads its part of one shared file and
rank 0 writes the profile. With --launch it also calibrates each executor's launch line on whole
runs of a small synthetic system at N = cores and 2 x cores (about a minute on a few cores; more
with many). Beside its wall times it records what else ran (load average, steal, the CPU time of
other work: every process the probe starts, at any depth, is its own) and marks the profile busy
when other work took half a core or more: a prediction from
it then says so. The profile (--out) is what `trajscale report R.json --predict N
--machine PROFILE.json` predicts for (docs/scaling.md)."""


def add_parser(sub) -> None:
    p = sub.add_parser("probe", help="measure the storage and this machine: a profile for report --predict",
                       description=DESCRIPTION)
    p.add_argument("path", metavar="PATH", help="a folder on the storage to measure (or a file there to read)")
    p.add_argument("--seconds", type=positive_float, default=20.0, metavar="S",
                   help="time the reads and starts may take, roughly (default 20)")
    p.add_argument("--bytes", dest="nbytes", type=_size, default=256 * 2**20, metavar="B",
                   help="bytes of the file read (default 256M; suffixes K, M, G)")
    p.add_argument("--readers", type=positive_int, default=0, metavar="K",
                   help="most concurrent readers (default: twice the cores, at most 16; under MPI the ranks)")
    p.add_argument("--launch", action="store_true",
                   help="also calibrate each executor's launch line on whole runs (processes, and MPI and "
                        "Dask where installed; not under mpiexec)")
    p.add_argument("--executors", type=_names, default=None, metavar="NAMES",
                   help="with --launch: the executors calibrated, comma-separated (default: every one installed "
                        "here); the other lines are not measured")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="K",
                   help="with --launch: whole runs per calibration point, their median kept (default 1)")
    p.add_argument("--out", default=None, metavar="PROFILE.json", help="write the machine profile here")
    add_overwrite(p)
    p.set_defaults(func=main)


def _size(text: str) -> int:
    import argparse

    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        value = int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 64M)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _calibrated(asked: list[str] | None) -> list[str]:
    """The executors ``--executors`` names, each one this machine can run (all of them when none is named)."""
    from ..report.calibrate import executors_here

    here = executors_here()
    if asked is None:
        return here
    unknown = [n for n in asked if n not in here]
    if unknown or not asked:
        raise ConfigError(f"probe --executors: {', '.join(unknown) or 'none named'}: the executors calibrated "
                          f"here are {', '.join(here)} (an executor's modules and, for MPI, mpiexec installed)")
    return list(dict.fromkeys(asked))


def main(args) -> int:
    from ..report.probe import ProbeOptions, probe, probe_mpi, under_mpi

    check_outputs(args.out, inputs=[args.path], overwrite=args.overwrite)
    opts = ProbeOptions(path=args.path, seconds=args.seconds, nbytes=args.nbytes, max_readers=args.readers)
    if args.launch and under_mpi():
        raise ConfigError("probe --launch starts its own workers and MPI ranks: run it without mpiexec")
    if args.executors is not None and not args.launch:
        raise ConfigError("probe --executors names the executors --launch calibrates: give --launch too")
    executors = _calibrated(args.executors) if args.launch else None
    machine = probe_mpi(opts) if under_mpi() else probe(opts)
    if machine is None:   # an MPI rank other than 0
        return 0
    if args.launch:
        import logging
        from pathlib import Path

        from ..report.calibrate import calibrate_launch

        folder = Path(args.path) if Path(args.path).is_dir() else Path(args.path).parent
        machine = calibrate_launch(folder, machine, executors, repeat=args.repeat,
                                   log=logging.getLogger("trajscale.probe").info)
    print(machine.format_assumptions())
    if args.out:
        machine.write(args.out, overwrite=args.overwrite)
        print(f"profile: {args.out}")
    return 0
