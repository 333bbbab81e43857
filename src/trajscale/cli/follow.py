"""``trajscale run ... --follow``: the options of a followed run, and its publishing of results."""

from __future__ import annotations

import logging
import sys
from functools import partial

from .checks import positive_float, positive_int

log = logging.getLogger("trajscale")


def add_follow_options(p) -> None:
    g = p.add_argument_group("following a trajectory still being written")
    g.add_argument("--follow", action="store_true",
                   help="the trajectory is still being written: analyse frames as they land, until the writer "
                        "marks it complete (TRAJ.done beside an XTC/TRR), --idle seconds pass without a "
                        "frame, or Ctrl-C")
    g.add_argument("--every", type=partial(positive_float, finite=False), default=None, metavar="S",
                   help="with --follow: rewrite --out and --report at most every S seconds (default 30)")
    g.add_argument("--every-frames", type=positive_int, default=None, metavar="K",
                   help="with --follow: ... or once K new frames are analysed")
    g.add_argument("--idle", type=partial(positive_float, finite=False), default=None, metavar="S",
                   help="with --follow: end after S seconds without a new frame (default 60)")
    g.add_argument("--tee", default=None, metavar="FILE.h5md",
                   help="with an imd://HOST:PORT stream: keep every frame received in this H5MD file")


def refuse_options_without_effect(args, trajectory) -> None:
    """Options that would do nothing in this run, refused before any work, each in one line saying why."""
    from ..errors import ConfigError
    from ..sources import is_stream

    stream = is_stream(trajectory)
    if args.tee and not stream:
        raise ConfigError(f"--tee keeps the frames of an imd://HOST:PORT stream; {trajectory} is a file, "
                          "already on disk (nothing to keep)")
    given = [opt for opt, value in (("--every", args.every), ("--every-frames", args.every_frames),
                                    ("--idle", args.idle)) if value is not None]
    if given and not (args.follow or stream):
        raise ConfigError(f"{' and '.join(given)}: for --follow (a trajectory still being written); without "
                          "it the run reads the trajectory once, whole")
    if args.continuous and (args.follow or stream):
        raise ConfigError("--continuous joins parts that overlap; a followed run reads one growing trajectory")
    if args.strict and (args.follow or stream):
        raise ConfigError("--strict refuses a finished XTC/TRR whose last frame is cut short; a followed run "
                          "reads whole frames as they land, and ends naming damage when it meets it")
    from .options import executor_options

    executor_options(args)   # an option of another executor than this run's is refused, naming those that take it


def follow_options(args, trajectory):
    """The :class:`~trajscale.endings.FollowOptions` of ``--follow`` or an ``imd://`` stream; else None."""
    from ..sources import is_stream

    if not (args.follow or is_stream(trajectory)):
        return None
    from ..endings import FollowOptions
    from .checks import check_outputs

    if args.tee:
        check_outputs(args.tee, None, inputs=[args.topology], overwrite=args.overwrite)
    return FollowOptions(every_s=30.0 if args.every is None else args.every, every_frames=args.every_frames,
                         idle=60.0 if args.idle is None else args.idle, tee=args.tee, overwrite=args.overwrite)


def run_options(args, trajectory):
    """The one :class:`~trajscale.runspec.RunOptions` of a ``run ANALYSIS`` command, followed or not."""
    from ..runspec import RunOptions
    from .options import executor_options

    follow = follow_options(args, trajectory)   # None unless --follow or a stream
    # off a terminal, progress is a line per 10 %; a followed run's tasks come a round at a time
    quiet = args.no_progress or getattr(args, "quiet", False) or follow is not None
    return RunOptions(executor=args.executor, n_workers=args.n_workers, n_tasks=args.tasks, start=args.start,
                      stop=args.stop, step=args.step, max_block_bytes=int(args.max_block_mb * 1024**2),
                      progress=not quiet, group=args.h5md_group, assume_units=args.assume_units,
                      continuous=args.continuous, follow=follow, executor_options=executor_options(args))


def publisher(args, outputs):
    """``on_update`` of a followed run: each results file and ``--report`` rewritten as results grow."""

    def publish(result) -> None:
        outputs.save(result)
        report = (result[0] if isinstance(result, list) else result).report
        if args.report:
            report.write(args.report)
        if report.meta.follow.ended is None:
            log.info("%d frames analysed so far", report.n_frames)

    return publish


def finish(result, out: str | None, args) -> int:
    """End a followed run whose results are saved in ``out``: the summary, a last stderr line, the exit status."""
    from ..follow import last_line
    from ..report.summary import run_summary

    print(run_summary(result.report, out, args.report))
    print(last_line(result), file=sys.stderr)
    return exit_code(result)


def exit_code(result) -> int:
    """A followed run's exit status (:class:`~trajscale.endings.Ending`): 0 when the file was marked complete or
    the stream ended normally, 128 + the signal for an interrupted run, else the ending's own status, so a
    script tells a run over a whole trajectory from one over the part that could be read."""
    from ..endings import Ending
    from ..util import stop_requested

    return Ending.of(result.report.meta.follow.ended).exit_status(stop_requested())
