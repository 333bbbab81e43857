"""``trajscale`` command line: one module per command, each with ``add_parser`` and ``main``."""

from __future__ import annotations

import _thread
import argparse
import contextlib
import gc
import importlib
import logging
import os
import signal
import sys

from ..errors import ConfigError, TrajscaleError

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
    "probe": "trajscale.cli.probe",
}


def _add_global_options(p: argparse.ArgumentParser, after: bool = False) -> None:
    """``-v``/``-q`` on the main parser, and on every command's (``after``) under their own dests."""
    suffix = "_after" if after else ""
    default = 0 if not after else argparse.SUPPRESS
    p.add_argument("-v", "--verbose", action="count", default=default, dest=f"verbose{suffix}",
                   help="-v: trajscale's own debug lines; -vv: the libraries' too (MDAnalysis, Dask, h5py, ...)")
    p.add_argument("-q", "--quiet", action="store_true", default=False if not after else argparse.SUPPRESS,
                   dest=f"quiet{suffix}",
                   help="nothing on success (no summary, no warnings, no progress): errors only")


def _command_parsers(parser: argparse.ArgumentParser):
    """Every parser under ``parser`` that a command line ends in (``run rmsd``, ``convert``, ...)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
        return
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):   # aliases map to the same parser
            yield from _command_parsers(child)


class _VersionAction(argparse.Action):
    """``--version``: the installed version, read only when asked (importlib.metadata scans sys.path)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from .._version import version

        parser.exit(message=f"trajscale {version()}\n")


def build_parser(only: str | None = None, argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``trajscale`` parser; with ``only`` that command's subparser alone (a run imports one command
    module); with ``argv`` too, a command's ``add_parser_for(sub, argv)`` may build only what the line needs."""
    parser = argparse.ArgumentParser(
        prog="trajscale",
        description="MD trajectory I/O and analysis at the speed of the storage (H5MD, MPI-IO, Dask).")
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version and exit")
    _add_global_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        if only is None or name == only:
            command = importlib.import_module(module)
            narrowed = getattr(command, "add_parser_for", None) if only is not None and argv is not None else None
            if narrowed is not None:
                narrowed(sub, argv)
            else:
                command.add_parser(sub)
    for p in _command_parsers(parser):
        if p is not parser:
            _add_global_options(p, after=True)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command named in ``argv`` when its place is certain (only -v/-q flags before it), else None."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
        if arg not in ("-v", "-vv", "--verbose", "-q", "--quiet"):
            return None   # --help, --version, a typo: the whole parser answers
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse a command line; ``-v``/``-q`` count wherever they stand (``args.verbose``, ``args.quiet``)."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command(words), words)
    args = parser.parse_args(argv)
    args.verbose = min(2, args.verbose + getattr(args, "verbose_after", 0))
    args.quiet = bool(args.quiet or getattr(args, "quiet_after", False))
    for extra in ("verbose_after", "quiet_after"):
        if hasattr(args, extra):
            delattr(args, extra)
    if args.quiet and args.verbose:
        parser.error("-q and -v exclude each other")
    return args


def _terminate(signum, frame):
    # Raising here unwinds through atomic_output, which removes temporary files.
    from ..util import request_stop

    if not request_stop(signum):
        raise SystemExit(128 + signum)


def _unraisable_hook() -> None:
    """What Python does with an exception it cannot raise (from a ``__del__`` or a weakref callback): a
    signal's exit (:func:`_terminate`) that landed inside such a callback would be dropped, so the signal
    is raised again for after the callback; an MDAnalysis reader failing again in ``__del__`` after
    trajscale's one-line error is logged, not printed."""
    default = sys.unraisablehook

    def hook(unraisable) -> None:
        if unraisable.exc_type is SystemExit and _raised_by(unraisable.exc_traceback, _terminate):
            # sent again from a new thread, not waited for: sent from this one, the handler would run at once,
            # still in here; so it runs in the main thread once this callback has returned
            _thread.start_new_thread(os.kill, (os.getpid(), unraisable.exc_value.code - 128))
            return
        obj = unraisable.object
        if getattr(obj, "__name__", "") == "__del__" and getattr(obj, "__module__", "").startswith("MDAnalysis."):
            logging.getLogger(__name__).debug("ignored in %s: %r", obj.__qualname__, unraisable.exc_value)
            return
        default(unraisable)

    sys.unraisablehook = hook


def _raised_by(tb, function) -> bool:
    """Whether the traceback ``tb`` ends in ``function``."""
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code is function.__code__


#: Libraries whose log lines show only errors unless -vv asks for all of them.
LIBRARIES = ("MDAnalysis", "distributed", "dask", "h5py", "matplotlib", "asyncio", "tornado", "fsspec",
             "PIL", "urllib3")


class _Formatter(logging.Formatter):
    """``trajscale: message`` for trajscale's lines, ``LOGGER: message`` for a library's (-vv)."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + (record.exc_text or self.formatException(record.exc_info))
        name = "trajscale" if record.name.split(".")[0] in ("trajscale", "root", "__main__") else record.name
        return f"{name}: {msg}"


def configure_output(quiet: bool = False, verbose: int = 0) -> None:
    """Logging and warnings for this process and the workers it starts: by default trajscale's INFO lines and
    the libraries' warnings; ``quiet``: errors only (no warnings, in workers too through PYTHONWARNINGS);
    ``verbose`` 1: trajscale's DEBUG lines; 2: every library's too."""
    from ..storage import hide_in_logs

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    hide_in_logs(handler)   # a URL's password, wherever a line (a library's too) names it
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose >= 2 else logging.WARNING)
    logging.getLogger("trajscale").setLevel(logging.ERROR if quiet else logging.DEBUG if verbose else logging.INFO)
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose >= 2 else logging.ERROR)
    if verbose < 2:
        # MDAnalysis logs its parse errors before raising them; trajscale reports the exception once.
        logging.getLogger("MDAnalysis").setLevel(logging.CRITICAL)
    # distributed sets its loggers from dask's config when imported; worker processes read it from the environment.
    os.environ["DASK_LOGGING__DISTRIBUTED"] = "debug" if verbose >= 2 else "error" if quiet else "warning"
    if quiet:
        import warnings

        warnings.simplefilter("ignore")
        os.environ["PYTHONWARNINGS"] = "ignore"   # spawned and forkserver workers start with it


#: Commands whose printed text is the answer asked for (as ``--json`` is): -q keeps it.
ANSWERS = frozenset({"inspect", "report"})


@contextlib.contextmanager
def _quiet_stdout(args):
    """With -q, what a command prints about its work goes nowhere; ``inspect`` and ``report`` print their answer."""
    if not args.quiet or args.command in ANSWERS:
        yield
        return
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        yield


def _parse_once_per_job(argv: list[str] | None) -> argparse.Namespace:
    """:func:`parse_args`; under a launcher only rank 0 says a typo or ``--help``, and every rank exits as it does."""
    from ..launch import rank

    if rank() == 0:
        return parse_args(argv)
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull), contextlib.redirect_stdout(devnull):
        return parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # Before NumPy loads: OpenBLAS's threads would only contend with the executors' workers. A value set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # Imports make tens of thousands of objects and few cycles: a young-generation collection every 700
    # allocations walked them again and again. Every cycle is still collected; at most 100,000 small
    # objects (a few MB) wait for it.
    gc.set_threshold(100_000, 10, 10)
    args = _parse_once_per_job(argv)
    configure_output(args.quiet, args.verbose)
    if args.quiet:
        args.no_progress = True
    _unraisable_hook()
    # The handler imports from trajscale.util: it is made whole first (a signal may land mid-import).
    from .. import util  # noqa: F401

    try:
        # SIGINT too: a KeyboardInterrupt raised in a C callback can be swallowed. Inside the try: a signal landing
        # as soon as its handler is in place is said like any other
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGINT, _terminate)
        from .storage import use_storage_options

        use_storage_options(args)   # --storage-option: for the URLs this command opens
        if not _this_process_runs(args):
            return 0   # a command that knows nothing of MPI runs once, on rank 0
        from .options import refuse_url_outputs

        refuse_url_outputs(args)   # every command's outputs are local paths: a URL is refused in one line
        if args.command in WORKS:
            from ..launch import say_time_left

            predict = getattr(args, "predicted_wall", None)   # (run --predict-from: its prediction, in a job that ends)
            say_time_left(what=f"trajscale {args.command}", predict=predict and (lambda: predict(args)))
        from ..formats import partial_frames_policy

        with _quiet_stdout(args), partial_frames_policy(getattr(args, "strict", False)):
            code = int(args.func(args) or 0)
        if argv is None:   # the program itself, about to exit (not a caller passing argv, e.g. a test)
            # Tearing down the libraries' objects at exit is time no report counts: frozen objects are left to the OS.
            gc.freeze()
        return code
    except TrajscaleError as exc:
        if not exc.reported_elsewhere:
            from ..storage import redacted

            print(f"trajscale {args.command}: error: {redacted(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:
        if exc.code and exc.code > 128:
            _interrupted(args, f"terminated by signal {exc.code - 128}", exc)
            if argv is None:
                gc.freeze()   # a stopped command ends within seconds: its objects are left to the OS too
        raise
    except KeyboardInterrupt:
        _interrupted(args, "interrupted", SystemExit(130))
        return 130
    except Exception:
        from ..util import stop_requested

        signum = stop_requested()
        if not signum:
            raise
        # a signal's exit raised in a library's code can come out as that library's error (numpy's ImportError, seen)
        exc = SystemExit(128 + signum)
        _interrupted(args, f"terminated by signal {signum}", exc)
        raise exc from None


#: Commands that work on every rank of an MPI launcher's world (``run``: its executor decides); ``convert`` and
#: ``rechunk`` too without ``--executor``, and any command given a launcher's executor; others run on rank 0 alone.
ON_RANKS = frozenset({"run", "probe"})


#: Commands whose work may take long enough for a scheduler's job to end first.
WORKS = frozenset({"run", "convert", "rechunk", "split", "pack", "verify", "probe", "index"})


def _on_ranks(args) -> bool:
    """True when ``args``'s command does its work on every rank of an MPI launcher's world."""
    if args.command in ON_RANKS:
        return True
    from ..executor_registry import EXECUTORS

    executor = getattr(args, "executor", None)
    if executor in EXECUTORS and EXECUTORS[executor].workers == "launcher":
        return True
    return args.command in ("convert", "rechunk") and executor is None


def _this_process_runs(args) -> bool:
    """Whether this process runs the command, once per job: under a launcher whose ranks MPI joins, a command
    that knows nothing of MPI on rank 0 alone (``convert``/``rechunk`` with a pool of their own refused as ``run``
    refuses them); processes MPI cannot join (``srun --mpi=none``) all refused, rank 0 saying why."""
    from ..launch import current

    launch = current()
    if not launch.several:
        return True
    if launch.independent:
        exc = ConfigError(launch.refusal(f"the whole {args.command}"))
        exc.reported_elsewhere = launch.rank != 0
        raise exc
    if args.command in ("convert", "rechunk") and not _on_ranks(args):
        from ..parallel import check_not_launched

        check_not_launched(args.executor)   # a pool in every rank: refused (rank 0 says why)
    return _on_ranks(args) or launch.rank == 0


def _interrupted(args, how: str, exc: SystemExit) -> None:
    """One line on what an interrupted command left (``set_defaults(kept_when_interrupted=fn)``); rank 0
    interrupted before it shared what it prepared makes the ranks waiting in that share end as it does."""
    from ..launch import rank

    if rank() == 0:   # under a launcher every rank was signalled: rank 0 says it once
        kept = getattr(args, "kept_when_interrupted", None)
        print(f"trajscale {args.command}: {how}; {kept(args) if kept else 'no partial output was kept'}",
              file=sys.stderr)
    if "trajscale.sharing" in sys.modules:
        sys.modules["trajscale.sharing"].share_interruption(exc)


if __name__ == "__main__":
    sys.exit(main())
