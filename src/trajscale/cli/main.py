"""``trajscale`` command line: one module per command, each with ``add_parser`` and ``main``."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys

from .._version import __version__
from ..errors import TrajscaleError

#: command -> module (imported only when that command runs).
COMMANDS = {
    "convert": "trajscale.cli.convert",
    "inspect": "trajscale.cli.inspect",
    "verify": "trajscale.cli.verify",
    "run": "trajscale.cli.run",
    "report": "trajscale.cli.report",
    "demo": "trajscale.cli.demo",
    "split": "trajscale.cli.split",
    "index": "trajscale.cli.index",
    "rechunk": "trajscale.cli.rechunk",
    "repair": "trajscale.cli.repair",
    "pack": "trajscale.cli.pack",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trajscale",
        description="MD trajectory I/O and analysis at the speed of the storage (H5MD, MPI-IO, Dask).")
    parser.add_argument("--version", action="version", version=f"trajscale {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging (Dask's and MDAnalysis's own messages included)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors: no warnings, no progress bars")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def _terminate(signum, frame):
    # Raising here unwinds through atomic_output, which removes temporary files.
    from ..util import request_stop

    if not request_stop(signum):
        raise SystemExit(128 + signum)


def _quiet_failed_readers() -> None:
    """An MDAnalysis reader that failed in ``__init__`` fails again in ``__del__`` (XTCReader: no
    ``_xdr``), and Python prints that traceback after trajscale's one-line error: log it instead."""
    default = sys.unraisablehook

    def hook(unraisable) -> None:
        obj = unraisable.object
        if getattr(obj, "__name__", "") == "__del__" and getattr(obj, "__module__", "").startswith("MDAnalysis."):
            logging.getLogger(__name__).debug("ignored in %s: %r", obj.__qualname__, unraisable.exc_value)
            return
        default(unraisable)

    sys.unraisablehook = hook


def _quiet_dask(args) -> None:
    """Dask's own logging at WARNING (ERROR with -q, INFO with -v), in this process and its workers.

    distributed sets its loggers from dask's config when it is imported (after
    this), and worker processes read the same config from the environment.
    """
    level = "info" if args.verbose else "error" if args.quiet else "warning"
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", level)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="trajscale: %(message)s", stream=sys.stderr)
    for noisy in ("distributed", "numba", "matplotlib", "asyncio", "h5py", "tornado"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    _quiet_dask(args)
    _quiet_failed_readers()
    # MDAnalysis logs its parse errors before raising them; trajscale reports the exception once.
    logging.getLogger("MDAnalysis").setLevel(logging.DEBUG if args.verbose else logging.CRITICAL)
    # SIGINT too: a KeyboardInterrupt raised inside a C callback can be swallowed.
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    try:
        code = int(args.func(args) or 0)
        if argv is None:   # the program itself, about to exit (not a caller passing argv, e.g. a test)
            import gc

            # Tearing down MDAnalysis's, h5py's and NumPy's objects at exit took 0.2-0.5 s, after the
            # run report's clock stopped (issue 23): frozen objects are left to the OS.
            gc.freeze()
        return code
    except TrajscaleError as exc:
        if not exc.reported_elsewhere:
            print(f"trajscale {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:
        if exc.code and exc.code > 128:
            _say_interrupted(args, f"terminated by signal {exc.code - 128}")
        raise
    except KeyboardInterrupt:
        _say_interrupted(args, "interrupted")
        return 130


def _say_interrupted(args, how: str) -> None:
    """One line on what an interrupted command left: commands that keep their partial output for
    ``--resume`` say so through ``set_defaults(kept_when_interrupted=fn(args) -> str)``."""
    import os

    if (os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0") != "0":
        return   # under mpiexec every rank was signalled: rank 0 says it once
    kept = getattr(args, "kept_when_interrupted", None)
    print(f"trajscale {args.command}: {how}; {kept(args) if kept else 'no partial output was kept'}",
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
