"""``trajscale report``: where the time of a run went, stragglers, scaling and advice."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .checks import add_overwrite, check_outputs

DESCRIPTION = """\
Read run reports written by `trajscale run --report` (or RunReport.write) and print
the per-worker time in each phase (topology, open trajectory, read I/O, compute,
wait, communication), throughput, R_comp/IO and R_comp/comm, stragglers (workers
or tasks slower than 1.5 x the median, with the phase that made them slow) and
advice. Several reports of the same job at different worker counts also give a
scaling table S(N), E(N) relative to the smallest N (or to --baseline)."""


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="diagnose run reports: stragglers, scaling, advice",
                       description=DESCRIPTION)
    p.add_argument("reports", nargs="+", metavar="REPORT.json", help="run report(s) (JSON)")
    p.add_argument("--baseline", default=None, metavar="BASE.json",
                   help="serial or N=1 report of the same job: adds S(N) = t1/tN and E(N) = S(N)/N")
    p.add_argument("--plot", default=None, metavar="OUT.png",
                   help="plot per-worker phase bars (and scaling curves for several reports)")
    p.add_argument("--trace", default=None, metavar="TRACE.json",
                   help="write a Chrome/Perfetto trace (open in ui.perfetto.dev)")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON instead of tables")
    add_overwrite(p)
    p.set_defaults(func=main)


def load_report(path: str):
    """Load a report; any unreadable or malformed file becomes an InputFileError."""
    from ..errors import InputFileError
    from ..report.timing import RunReport

    required = ("analysis", "executor", "n_workers", "t_total")
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        raw = None   # RunReport.load names the problem
    if raw is not None and not (isinstance(raw, dict) and all(k in raw for k in required)):
        raise InputFileError(path, "not a trajscale run report (a JSON object with "
                                   f"{', '.join(required)}, ... was expected)")
    try:
        return RunReport.load(path)
    except InputFileError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InputFileError(path, f"not a trajscale run report ({exc})") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read ({exc.strerror or exc})") from None


def main(args) -> int:
    from ..errors import InputFileError
    from ..report.diagnose import diagnose
    from ..report.metrics import json_safe, scaling
    from ..report.table import format_scaling, format_table

    check_outputs(args.plot, args.trace, inputs=[*args.reports, args.baseline], overwrite=args.overwrite)
    reports = [load_report(p) for p in args.reports]
    baseline = load_report(args.baseline) if args.baseline else None
    try:
        diags = [diagnose(r, baseline) for r in reports]
    except (TypeError, ValueError, AttributeError) as exc:   # e.g. strings where numbers belong
        raise InputFileError(args.reports[0], f"not a trajscale run report ({exc})") from None
    multi = len(reports) > 1
    if args.json:
        out = {"reports": [{"path": p, "diagnosis": d.to_dict()} for p, d in zip(args.reports, diags)]}
        if multi or baseline is not None:
            out["scaling"] = [json_safe(asdict(pt)) for pt in scaling(reports, reference=baseline)]
        print(json.dumps(out, indent=1))
    else:
        blocks = []
        for p, r, d in zip(args.reports, reports, diags):
            head = f"== {p} ==\n" if multi else ""
            blocks.append(head + format_table(r, d))
        if multi:
            blocks.append(format_scaling(reports, baseline))
        print("\n\n".join(blocks))
    if args.plot:
        from ..report.plots import plot_report

        plot_report(reports, args.plot, baseline=baseline)
        if not args.json:
            print(f"\nplot:  {args.plot}")
    if args.trace:
        from ..report.trace import write_trace

        write_trace(reports, args.trace, labels=args.reports if multi else None)
        if not args.json:
            print(f"trace: {args.trace}" if args.plot else f"\ntrace: {args.trace}")
    return 0

