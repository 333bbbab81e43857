"""``trajscale run ANALYSIS --ensemble CATALOG``: every trajectory of an ensemble in one job.

The catalog (CSV, TOML, Parquet, or a glob) names the trajectories and their topologies.  Each
trajectory's results are saved in ``--results FOLDER`` as it finishes, with ``refused.csv``; ``--out``
writes an analysis's results over the ensemble.  Exit status: 0 when every trajectory was analysed,
:data:`~trajscale.ensemble.run.EXIT_SOME_REFUSED` (8) when some were refused, 2 when all were, 9
(:class:`~trajscale.errors.ServerUnreachable`) when a server stopped answering, the finished ones kept."""

from __future__ import annotations

import argparse
import os
import re
import sys

from ..errors import ConfigError
from .checks import positive_int

#: Global flags that may stand before a run's options (``trajscale run -v --plan ...``).
_GLOBAL_FLAGS = ("-v", "-vv", "--verbose", "-q", "--quiet")


def add_options(p) -> None:
    """``--ensemble`` and what goes with it, on a ``run`` parser."""
    g = p.add_argument_group("ensembles", "many trajectories, each with its own topology, in one job "
                                          "(docs/ensembles.md); TOPOLOGY and TRAJECTORY are then not given")
    g.add_argument("--ensemble", default=None, metavar="CATALOG",
                   help="run over every trajectory a catalog lists (CSV, TOML or Parquet: columns trajectory, "
                        "topology, name and labels; a path or URL), a glob matches (runs/*/md.xtc with "
                        "--topology md.tpr, s3://bucket/prefix/*.h5) or one file holds (an mdCATH file)")
    g.add_argument("--topology", dest="ensemble_topology", default=None, metavar="FILE",
                   help="with --ensemble GLOB (or one file): the topology of every trajectory it matches "
                        "(md.tpr, or a URL); a pattern with the glob's wildcards (runs/*/md.tpr for runs/*/md.xtc) "
                        "or {label} fields (--labels) gives each trajectory its own")
    g.add_argument("--labels", dest="ensemble_labels", default=None, metavar="REGEX",
                   help="with --ensemble GLOB: a regular expression searched in each matched path; its named "
                        "groups are the trajectory's labels (runs/(?P<system>[^/]+)/rep(?P<replica>\\d+))")
    g.add_argument("--results", default=None, metavar="FOLDER",
                   help="with --ensemble: where each trajectory's results are saved as it finishes, with the "
                        "refused table refused.csv (default: CATALOG-results in the current folder)")
    g.add_argument("--resume", action="store_true",
                   help="with --ensemble: skip the trajectories whose results --results holds from an "
                        "interrupted run of the same analyses")
    g.add_argument("--max-open", type=positive_int, default=16, metavar="N",
                   help="with --ensemble: trajectories a worker keeps open at once (default 16)")
    g.add_argument("--round-size", type=positive_int, default=None, metavar="N",
                   help="with --ensemble: trajectories run and saved together; a stopped run keeps the rounds "
                        "before (default 64 per worker)")


def optional_positionals(p) -> None:
    """TOPOLOGY and TRAJECTORY become optional: ``--ensemble`` stands for them."""
    for action in p._actions:
        if action.dest == "topology":
            action.nargs, action.required = "?", False
        elif action.dest == "trajectories":
            action.nargs, action.required = "*", False


def require_positionals(args) -> None:
    """Without ``--ensemble``, a run names its topology and trajectories."""
    if getattr(args, "ensemble", None) is None and (args.topology is None or not args.trajectories):
        raise ConfigError("give the TOPOLOGY and the TRAJECTORY file(s), or --ensemble CATALOG for many "
                          "trajectories with their own topologies")


class RunParser(argparse.ArgumentParser):
    """The ``run`` command's parser: ``run --plan FILE --ensemble CATALOG`` names no analysis, so the plan's
    parser is named for it (``plan``) before the first option after ``--plan FILE``."""

    def parse_known_args(self, args=None, namespace=None):
        return super().parse_known_args(plan_before_options(list(args or [])), namespace)


def plan_before_options(args: list[str]) -> list[str]:
    """``args`` with ``plan`` put before the first option that directly follows ``--plan FILE``."""
    i, planned = 0, False
    while i < len(args):
        a = args[i]
        if a == "--plan":
            planned, i = True, i + 2
        elif a.startswith("--plan="):
            planned, i = True, i + 1
        elif a in _GLOBAL_FLAGS:
            i += 1
        else:
            break
    if planned and i < len(args) and args[i].startswith("-") and args[i] not in ("-h", "--help"):
        return [*args[:i], "plan", *args[i:]]
    return args


def output_extensions(planned) -> None:
    """Each ``--out`` (or plan ``out``) names a format of an ensemble's results."""
    from ..ensemble.results import offered_formats
    from ..errors import OutputError

    for p in planned:
        if not p.out:
            continue
        offered = offered_formats(p.analysis)
        ext = os.path.splitext(p.out)[1].lower()
        if ext not in offered:
            raise OutputError(p.out, f"an ensemble's {p.name} results are written as {', '.join(offered)} "
                                     f"(the extension decides); {ext or 'no extension'} is none of them")


def results_folder(args, planned=()) -> str:
    """``--results``, or ``NAME-results`` in the current folder, NAME the catalog's; for a glob, the first
    ``--out``'s (two glob runs in one folder, each with its own output, keep apart), else ``ensemble``."""
    if args.results:
        return args.results
    base = os.path.basename(args.ensemble.rstrip("/"))
    if any(c in base for c in "*?["):
        out = next((p.out for p in planned if p.out), None)
        base = os.path.basename(out) if out else "ensemble"
    return f"{os.path.splitext(base)[0] or 'ensemble'}-results"


def run_options(args):
    """The :class:`~trajscale.runspec.RunOptions` of an ensemble's run (its trajectories are read finished)."""
    from .follow import run_options as options_of_run

    if getattr(args, "follow", False):
        raise ConfigError("--follow: an ensemble's trajectories are read finished; run without --follow")
    return options_of_run(args, args.ensemble)


def main(args, planned) -> int:
    """Run the planned analyses over the ensemble, write their outputs, the report and the refused table."""
    from ..ensemble.catalog import Ensemble
    from ..ensemble.run import EXIT_SOME_REFUSED, atoms_named
    from ..ensemble.saved import REFUSED, folder_lock
    from ..launch import current
    from ..run import run
    from ..storage import redacted
    from .checks import check_outputs

    given = [x for x in (args.topology, *args.trajectories) if x is not None]
    if given:
        raise ConfigError(f"--ensemble {args.ensemble} names the trajectories: give no TOPOLOGY or TRAJECTORY "
                          f"(here: {' '.join(given)}); a glob's topology is --topology FILE")
    output_extensions(planned)
    folder = args.results = results_folder(args, planned)   # (what an interrupted run says it kept)
    check_outputs(*(p.out for p in planned), args.report, overwrite=args.overwrite)
    options = run_options(args)
    if args.resume:
        from ..ensemble.run import resume_revisions

        resume_revisions(folder, options.storage_options)
    ensemble = Ensemble.of(args.ensemble, options.storage_options, topology=args.ensemble_topology,
                           labels=args.ensemble_labels)
    atoms_named(ensemble)   # (refused before the results folder is taken)
    if not current().rank:   # the root holds the results folder until its outputs, read from there, are written
        folder_lock(folder).take()
    results = run([p.analysis for p in planned], ensemble=ensemble, options=options, results=folder,
                  resume=args.resume, overwrite=args.overwrite, strict=args.strict, max_open=args.max_open,
                  round_size=args.round_size)
    if results is None:   # an MPI rank other than 0
        return 0
    first = results[0]
    for p, r in zip(planned, results, strict=True):
        if p.out:
            r.save(p.out)
    if args.report and first.report is not None:
        _write_report(first, args.report)
    outs = ", ".join(p.out for p in planned if p.out) or None
    if first.report is None:
        print(f"nothing left to run: every trajectory's results were saved in {folder} before")
    elif not args.quiet:   # (-q: stdout goes nowhere; the summary is not even made)
        from ..report.summary import run_summary

        print(_atoms_per_trajectory(run_summary(first.report, outs, args.report), first.trajectories.atoms))
    for line in first.trajectories.lines():
        print(redacted(line))
    print(f"results of each trajectory: {folder}")
    line = redacted(refused_line(results, os.path.join(folder, REFUSED)))
    if line:   # (on stderr, as errors are: -q keeps it)
        print(line, file=sys.stderr, flush=True)
        return EXIT_SOME_REFUSED
    return 0


def refused_line(results, table: str) -> str:
    """One line on the trajectories the run refused, where their reasons are, and the first; '' when none."""
    refusals = list({(r.index, r.position): r for res in results for r in res.refused}.values())
    if not refusals:
        return ""
    refusals.sort(key=lambda r: (r.index, -1 if r.position is None else r.position))
    whole = {r.index for r in refusals if r.position is None}
    partly: dict[str, set[int]] = {}
    for r in refusals:
        if r.position is not None and r.index not in whole:
            partly.setdefault(r.analysis, set()).add(r.index)
    n = len(whole | {i for ids in partly.values() for i in ids})
    some = "; ".join(f"{len(ids)} by {name} alone" for name, ids in partly.items())
    first = refusals[0]
    return (f"refused: {n} trajector{'y' if n == 1 else 'ies'}"
            + (f" ({some}: their other analyses' results are kept)" if some else "")
            + f"; each with its reason in {table}; first: {first.member.name}"
            + (f" ({first.analysis})" if first.position is not None else "") + f": {first.reason}")


def _atoms_per_trajectory(summary: str, atoms: str) -> str:
    """The run summary with its atoms said per trajectory (``214-3341 atoms``)."""
    if not atoms:
        return summary
    head, sep, rest = summary.partition("\n")
    head = re.sub(r" x \d+ atoms read ", f" x {atoms} atoms read ", head, count=1)
    return head + sep + rest


def _write_report(result, path: str) -> None:
    import json
    from pathlib import Path

    from ..ensemble.summary import report_dict
    from ..util import save_output

    text = json.dumps(report_dict(result.report, result.trajectories), indent=1, default=str)
    save_output(path, lambda tmp: Path(tmp).write_text(text))


__all__ = ["RunParser", "add_options", "main", "optional_positionals", "plan_before_options", "refused_line",
           "require_positionals"]
