"""``trajscale`` command line: one module per command, each with ``add_parser`` and ``main``."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys

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


class _VersionAction(argparse.Action):
    """``--version``: the installed version, read only when asked (importlib.metadata scans sys.path)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from .._version import version

        parser.exit(message=f"trajscale {version()}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``trajscale`` parser; with ``only`` (a command's name) that command's subparser alone,
    so a run imports one command module, not all of them."""
    parser = argparse.ArgumentParser(
        prog="trajscale",
        description="MD trajectory I/O and analysis at the speed of the storage (H5MD, MPI-IO, Dask).")
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version and exit")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging (Dask's and MDAnalysis's own messages included)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors: no warnings, no progress bars")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(module).add_parser(sub)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command named in ``argv`` when its place is certain (only flags before it), else None."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
        if arg not in ("-v", "--verbose", "-q", "--quiet"):
            return None   # --help, --version, a typo: the whole parser answers
    return None


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
    parser = build_parser(_command(sys.argv[1:] if argv is None else argv))
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
        return int(args.func(args) or 0)
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
