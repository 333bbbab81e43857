"""``trajscale report``: where the time of a run went, stragglers, scaling and advice."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ..executor_registry import DEFAULT_PREDICTION, names
from .checks import add_overwrite, check_outputs, positive_float, positive_int

DESCRIPTION = """\
Read run reports written by `trajscale run --report` (or RunReport.write) and print
the per-worker time in each phase (topology, open trajectory, read I/O, compute,
wait, communication), throughput, R_comp/IO and R_comp/comm, stragglers (workers
or tasks slower than 1.5 x the median, with the phase that made them slow) and
advice. Several reports of the same job at different worker counts also give a
scaling table S(N), E(N) relative to the smallest N (or to --baseline). --predict
N,N,... predicts the same run at those rank counts from the report's own timings: wall time,
S(N), E(N), a range, the limiting resource, the N at which E(N) falls below 0.7 and what would
move it, for this machine (its cores measured) or the one named by --machine (a `trajscale probe`
profile) or --nodes/--cores-per-node, and for the storage case --storage names or auto chooses
(reads cold from the storage, or cached in memory); it prints every value it assumed and where that
value came from, and says when the report or the profile was measured on a busy machine (equations
and assumptions: docs/scaling.md)."""


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
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="OUT",
                   help="the diagnosis (and --predict's predictions) as JSON: printed, or written to OUT")
    add_overwrite(p)
    g = p.add_argument_group("prediction", "the same run at N ranks, from this report's own timings "
                                           "(equations: docs/scaling.md)")
    g.add_argument("--predict", default=None, metavar="N,N,...", type=_counts,
                   help="predict wall time, S(N), E(N) and the limiting resource at these rank counts")
    g.add_argument("--as", dest="predict_as", default=None, choices=names(predicted=True),
                   help="executor of the predicted runs (default: the report's, or "
                        f"{DEFAULT_PREDICTION} for a report of another executor)")
    g.add_argument("--machine", default=None, metavar="PROFILE.json",
                   help="the target machine: a profile written by `trajscale probe` (default: this machine, "
                        "its cores measured now)")
    g.add_argument("--storage-gbps", type=positive_float, default=None, metavar="B",
                   help="aggregate bandwidth of the shared storage, GB/s (default: reads scale per rank)")
    g.add_argument("--metadata-ms", type=positive_float, default=None, metavar="M",
                   help="ms per file open at a metadata server serving one open at a time "
                        "(default: the report's own open time, opens in parallel)")
    g.add_argument("--storage", default="auto", choices=("auto", "cold", "cached"),
                   help="the reads the predicted run meets: cold (from the storage), cached (from the page "
                        "cache), or auto: chosen from the report's cache state, the file's size against a "
                        "node's memory and the probe's rates (default; the assumptions say which and why)")
    g.add_argument("--nodes", type=positive_int, default=None, metavar="K", help="nodes of the target machine")
    g.add_argument("--cores-per-node", type=positive_int, default=None, metavar="C",
                   help="cores per node: more ranks than nodes x cores are oversubscribed")
    p.set_defaults(func=main)


def _counts(text: str) -> list[int]:
    """argparse type: ``2,16,128`` -> [2, 16, 128] (each >= 1)."""
    import argparse

    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of rank counts") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"rank counts must be whole numbers >= 1, got {text!r}")
    return out


def load_report(path: str):
    """Load a report; any unreadable or malformed file becomes an InputFileError."""
    from ..errors import InputFileError
    from ..report.summary import Report

    required = ("analysis", "executor", "n_workers", "t_total")
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        raw = None   # RunReport.load names the problem
    if raw is not None and not (isinstance(raw, dict) and all(k in raw for k in required)):
        raise InputFileError(path, "not a trajscale run report (a JSON object with "
                                   f"{', '.join(required)}, ... was expected)")
    try:
        return Report.load(path)
    except InputFileError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InputFileError(path, f"not a trajscale run report ({exc})") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read ({exc.strerror or exc})") from None


def _counted(path: str) -> str:
    """An ensemble run's count of its trajectories, as its summary said it (a line), or ''."""
    from ..ensemble.summary import count_line

    try:
        return "\n" + count_line(json.loads(Path(path).read_text())["ensemble"])
    except (OSError, ValueError, KeyError, TypeError):   # (a run of one trajectory: no count)
        return ""


def main(args) -> int:
    from ..errors import InputFileError
    from ..report.advice import diagnose
    from ..report.metrics import json_safe, scaling
    from ..report.table import format_scaling, format_table

    json_out = None if args.json in (None, "-") else args.json
    check_outputs(args.plot, args.trace, json_out, inputs=[*args.reports, args.baseline, args.machine],
                  overwrite=args.overwrite)
    if args.nodes is not None and args.cores_per_node is None and not args.machine:
        from ..errors import ConfigError

        raise ConfigError("--nodes needs --cores-per-node (the ranks a node runs without oversubscription)")
    reports = [load_report(p) for p in args.reports]
    baseline = load_report(args.baseline) if args.baseline else None
    try:
        diags = [diagnose(r, baseline) for r in reports]
    except (TypeError, ValueError, AttributeError) as exc:   # e.g. strings where numbers belong
        raise InputFileError(args.reports[0], f"not a trajscale run report ({exc})") from None
    multi = len(reports) > 1
    predicted = _predict(args, reports) if args.predict else None
    if args.json:
        out = {"reports": [{"path": p, "diagnosis": d.to_dict()} for p, d in zip(args.reports, diags, strict=False)]}
        if multi or baseline is not None:
            out["scaling"] = [json_safe(asdict(pt)) for pt in scaling(reports, reference=baseline)]
        if predicted is not None:
            out.update(predicted[1])
        text = json.dumps(out, indent=1)
        if args.json == "-":
            print(text)
        else:
            from ..util import atomic_output

            with atomic_output(args.json) as tmp:
                Path(tmp).write_text(text + "\n")
    if not args.json or args.json != "-":
        blocks = []
        for p, r, d in zip(args.reports, reports, diags, strict=False):
            head = f"== {p} ==\n" if multi else ""
            blocks.append(head + format_table(r, d) + _counted(p))
        if multi:
            blocks.append(format_scaling(reports, baseline))
        if predicted is not None:
            blocks.append(predicted[0])
        if args.json:
            blocks.append(f"json: {args.json}")
        print("\n\n".join(blocks))
    if args.plot:
        from ..report.plots import plot_report

        plot_report(reports, args.plot, baseline=baseline)
        if args.json != "-":
            print(f"\nplot:  {args.plot}")
    if args.trace:
        from ..report.trace import write_trace

        write_trace(reports, args.trace, labels=args.reports if multi else None)
        if args.json != "-":
            print(f"trace: {args.trace}" if args.plot else f"\ntrace: {args.trace}")
    return 0


def _predict(args, reports) -> tuple[str, dict]:
    """The table and JSON of ``--predict``: fitted on the smallest run, with a larger run's launch and latency."""
    from ..report.machine import Machine, this_machine
    from ..report.predict import assumptions_dict, efficiency_threshold, fit_reports, format_predictions
    from ..report.storage import predict_storage

    here = this_machine()
    machine = Machine.load(args.machine) if args.machine else here
    nodes = args.nodes if args.nodes is not None else (1 if args.cores_per_node is not None else None)
    machine = machine.with_given(nodes=nodes, cores_per_node=args.cores_per_node,
                                 storage_gbps=args.storage_gbps, metadata_ms=args.metadata_ms)
    got = predict_storage(fit_reports(reports, args.predict_as, ran_on=here), args.predict, machine, args.storage)
    model, preds, row = got.model, got.preds, (got.storage.row(),)
    keys = ("n", "t_wall", "t_low", "t_high", "speedup", "efficiency", "limit")
    data = {"predictions": [{k: p.to_dict()[k] for k in keys} for p in preds],
            "storage": {"case": got.storage.case, "chosen": got.storage.chosen, "evidence": got.storage.evidence,
                        "other_case": [{"case": got.storage.other, **{k: p.to_dict()[k] for k in keys}}
                                       for p in got.other]},
            "assumptions": assumptions_dict(model, machine, row),
            "prediction_model": {"from": list(args.reports), "target": model.target,
                                 "n_below_0.7": efficiency_threshold(model, machine),
                                 "straggler": model.straggler or None, "notes": list(model.notes),
                                 "terms": [p.to_dict()["terms"] for p in preds]}}
    _say_late(preds)
    head = f"== prediction from {len(reports)} reports ==\n" if len(reports) > 1 else ""
    return head + format_predictions(model, preds, machine, row, got.other_column()), data


def _say_late(preds) -> None:
    """In a scheduler's job whose time left is known: the predicted runs that would not finish in it."""
    from ..launch import current

    job = current().job
    left = job.time_left() if job is not None else None
    late = [p for p in preds if left is not None and p.t_wall > left]
    if late:
        import logging

        logging.getLogger("trajscale").warning(
            "%s ends in %.0f s: the run predicted at N=%s would not finish in it (%s)", job.describe(), left,
            ",".join(str(p.n) for p in late), ", ".join(f"{p.t_wall:.0f} s at N={p.n}" for p in late))
