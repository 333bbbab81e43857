"""``trajscale run``: run analyses on an executor and summarise where the time went.

Every ``trajscale run NAME`` command and its options come from the analysis registry
(:data:`trajscale.analysis.ANALYSES`); ``--plan FILE`` runs a TOML file's analyses in one pass."""

from __future__ import annotations

import argparse
import logging
import os

from ..analysis import analysis_class
from ..errors import ConfigError, OutputError
from ..executor_registry import EXECUTORS, names
from ..plans import Planned, command_analyses, read_plan  # noqa: F401 (the CLI's names, read from Python too)
from .checks import add_overwrite, add_topology, check_outputs, check_topology, positive_int
from .follow import run_options
from .options import add_continuous_option, add_executor_options, add_h5md_options, add_strict_option

log = logging.getLogger("trajscale")


PLAN_HELP = ("run several analyses in one pass over the trajectory (each block read once): a TOML file with "
             "one table per analysis, named as the commands below ([rmsd]; [[rdf]] for several of one kind), "
             "whose keys are that command's option names (select, fit-select, ...) and out")


class _Names(dict):
    """The analyses' parsers by name; once all are added (``parsing``), argparse passes any first word to
    :class:`_AnalysisOrPlan` (with ``--plan`` it is the topology), which itself refuses an unknown name."""

    parsing = False

    def __contains__(self, name) -> bool:
        return self.parsing or dict.__contains__(self, name)


class _AnalysisOrPlan(argparse._SubParsersAction):
    """``run ANALYSIS ...``, or ``run --plan FILE TOP TRAJ...`` (no analysis named: the plan's parser)."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._name_parser_map = self.choices = _Names()

    def _known(self, name: str) -> bool:
        """Whether ``name`` is an analysis's command: trajscale's, or (looked for now) another package's."""
        if dict.__contains__(self.choices, name):
            return True
        if name.startswith("-"):
            return False
        self.choices.parsing = False   # (adding parsers checks their names)
        try:
            for other, cls in command_analyses(plugins=True).items():
                if not dict.__contains__(self.choices, other):
                    _add_analysis_parser(self, other, cls)
        finally:
            self.choices.parsing = True
        return dict.__contains__(self.choices, name)

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "plan", None) or any(v == "--plan" or v.startswith("--plan=") for v in values):
            if values and values[0] != "plan" and dict.__contains__(self.choices, values[0]):
                parser.error(f"--plan runs the analyses its file lists: give it without an analysis name "
                             f"(here {values[0]!r})")
            values = values if values and values[0] == "plan" else ["plan", *values]
        elif not (values and self._known(values[0])):
            names = [n for n in self.choices if n != "plan"]
            parser.error(f"argument ANALYSIS: invalid choice: {values[0]!r} (choose from "
                         f"{', '.join(map(repr, names))}; or --plan FILE)")
        super().__call__(parser, namespace, values, option_string)


def add_parser(sub, only: str | None = None) -> None:
    """The ``run`` command's parser: every analysis's, and the plan's; ``only`` (a built-in analysis's name, as
    :func:`add_parser_for` finds it): that analysis's parser alone, its module the only one imported."""
    analyses = command_analyses() if only is None else {only: analysis_class(only)}
    p = sub.add_parser("run", help=f"run an analysis ({', '.join(analyses)}), or several in one pass (--plan)",
                       description="Split-apply-combine analysis on serial, processes, threads, dask or mpi "
                                   "executors: `trajscale run ANALYSIS TOP TRAJ...`, or "
                                   "`trajscale run --plan FILE TOP TRAJ...` for several analyses in one pass. "
                                   "Analyses other packages register (entry points trajscale.analyses) run "
                                   "by their names too.")
    p.add_argument("--plan", default=None, metavar="FILE", help=PLAN_HELP)
    from .run_ensemble import RunParser

    p.__class__ = RunParser   # (run --plan FILE --ensemble CATALOG: no word names the plan's parser)
    asub = p.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True, action=_AnalysisOrPlan)
    for name, cls in analyses.items():
        _add_analysis_parser(asub, name, cls)
    if only is not None:
        asub.choices.parsing = True
        return
    # `run --plan FILE TOP TRAJ...`: no analysis named (left out of the list above: it has no help line)
    plan = asub.add_parser("plan", description=f"{PLAN_HELP[0].upper()}{PLAN_HELP[1:]}.")
    _positional(plan)
    plan.add_argument("--plan", default=argparse.SUPPRESS, metavar="FILE", help="the run plan (TOML)")
    add_run_options(plan)
    plan.set_defaults(func=main)
    asub.choices.parsing = True


#: Words on a ``run`` line after which every analysis's parser is built: help lists them all, a plan's
#: tables may name any of them.
_NEEDS_ALL = ("-h", "--help", "--plan")


def add_parser_for(sub, argv: list[str]) -> None:
    """:func:`add_parser` for ``argv``: the parser of the built-in analysis it names after ``run`` alone (building
    all slows every start); every analysis's where the line needs them all."""
    from ..analysis import BUILTIN
    from .run_ensemble import _GLOBAL_FLAGS

    words = [a for a in argv[argv.index("run") + 1:] if a not in _GLOBAL_FLAGS] if "run" in argv else []
    if not words or words[0] not in BUILTIN or any(a.split("=")[0] in _NEEDS_ALL for a in argv):
        add_parser(sub)
    else:
        add_parser(sub, only=words[0] if analysis_class(words[0]).command is not None else None)


def _add_analysis_parser(asub, name: str, cls) -> None:
    """``run NAME``: the analysis's own options (its ``command``), then those every run takes."""
    cmd = cls.command
    a = asub.add_parser(name, help=cmd.help, description=f"{cmd.help}. {cmd.out}.".replace("%", "%%"))
    _positional(a)
    for option in cmd.options:
        _add_option(a, cls, option)
    add_run_options(a)
    a.set_defaults(func=main)


def _positional(p) -> None:
    add_topology(p)
    p.add_argument("trajectories", nargs="+", help="H5MD file (fast path) or any trajectory MDAnalysis reads")
    from .run_ensemble import optional_positionals

    optional_positionals(p)   # (--ensemble CATALOG names them)


def _add_option(p, cls, o) -> None:
    """``--NAME`` of analysis option ``o``, its default (the constructor's) said in its help."""
    from ..analysis.options import help_text

    text = help_text(cls, o).replace("%", "%%")
    flag = f"--{o.name}"
    if o.is_switch:
        p.add_argument(flag, action="store_true", dest=o.dest, help=text)
    elif o.repeat:
        p.add_argument(flag, action="append", default=None, dest=o.dest, metavar=o.metavar, type=o.type, help=text)
    else:
        p.add_argument(flag, default=None, dest=o.dest, type=o.type, nargs=o.nargs, choices=list(o.choices) or None,
                       required=o.required, metavar=o.metavar, help=text)


def planned_from_args(args) -> list[Planned]:
    """The analyses a parsed command line asks for: ``run NAME``'s one, or a plan's."""
    if args.analysis == "plan":
        if getattr(args, "plan", None) is None:
            raise ConfigError("run plan: give the plan file with --plan FILE")
        if args.out:
            raise ConfigError(f"--out: with --plan each analysis's results file is the key out of its table "
                              f"in {args.plan}")
        return read_plan(args.plan)
    if getattr(args, "plan", None):
        raise ConfigError(f"--plan runs the analyses its file lists; give it without an analysis name "
                          f"(here: {args.analysis})")
    from ..analysis import BUILTIN
    from ..analysis.options import build

    # a built-in's class alone: command_analyses() imports every analysis module
    cls = analysis_class(args.analysis) if args.analysis in BUILTIN else command_analyses()[args.analysis]
    given = {o.name: getattr(args, o.dest) for o in cls.command.options}
    return [Planned(args.analysis, build(cls, given, f"run {args.analysis}"), args.out, given.get("select"))]


def _run(planned: list[Planned], args):
    """``trajscale.run`` of the analyses with the shared options; a followed run saves its outputs as they grow."""
    from ..run import run
    from .follow import publisher, refuse_options_without_effect

    traj = args.trajectories[0] if len(args.trajectories) == 1 else args.trajectories
    refuse_options_without_effect(args, traj)
    from ..kernels import superpose  # noqa: F401  (compiled kernels load before the run's clock starts)

    options = run_options(args, traj)
    on_update = publisher(args, Outputs(planned, args.topology)) if options.follow is not None else None
    analysis = planned[0].analysis if len(planned) == 1 else [p.analysis for p in planned]
    return run(analysis, args.topology, traj, options=options, on_update=on_update)


def check_run_outputs(args, planned: list[Planned]) -> None:
    """Before any work: no output is an input, one of another, or, without --overwrite, an existing file;
    each results file's extension names a format its analysis writes."""
    from ..analysis.results import output_format

    check_outputs(*(p.out for p in planned), args.report, inputs=[args.topology, *args.trajectories],
                  overwrite=args.overwrite)
    for p in planned:
        if p.out:
            output_format(p.out, p.analysis.formats, p.analysis.name)


class Outputs:
    """Saves each analysis's result to its results file (a PDB's atom names read from the topology once)."""

    def __init__(self, planned: list[Planned], topology) -> None:
        self.planned, self.topology, self._universe = planned, topology, None

    @property
    def paths(self) -> str | None:
        """The results files, for the summary (None: none)."""
        return ", ".join(p.out for p in self.planned if p.out) or None

    def save(self, results) -> None:
        """Save ``results`` (one result, or one per analysis); every file is tried, the first error raised."""
        results = results if isinstance(results, list) else [results]
        lost = None
        for p, result in zip(self.planned, results, strict=True):
            if not p.out:
                continue
            try:
                if p.out.lower().endswith(p.analysis.topology_outputs):
                    if self._universe is None:
                        from ..topology import load_universe

                        self._universe = load_universe(self.topology, topology_coordinates=False)
                    result.save(p.out, universe=self._universe)
                else:
                    result.save(p.out)
            except OutputError as exc:
                lost = lost or exc
        if lost is not None:
            raise lost


def main(args) -> int:
    """Every ``run`` command: analyses built and checked before any work, run in one pass, saved, summarised."""
    from .run_ensemble import require_positionals

    if getattr(args, "ensemble", None) is not None:   # every trajectory of a catalog, each with its topology
        from .run_ensemble import main as ensemble_main

        return ensemble_main(args, planned_from_args(args))
    require_positionals(args)
    check_topology(args)
    planned = planned_from_args(args)
    check_run_outputs(args, planned)   # before any work: a bad path fails in a second, not after the run
    _say_mpi_size(args)
    result = _run(planned, args)
    if result is None:   # an MPI rank other than 0
        return 0
    _say_selections(planned)
    outputs = Outputs(planned, args.topology)
    first = result[0] if isinstance(result, list) else result
    report = first.report
    if report.meta.follow is not None:   # saved as it grew, the last time when it ended
        from .follow import finish

        return finish(first, outputs.paths, args)
    lost = None   # an output that could not be written: the others are still written, then this raised
    try:
        outputs.save(result)
    except OutputError as exc:
        lost = exc
    try:
        _write_report(report, args.report)
    except OutputError as exc:
        lost = lost or exc
    if lost is not None:
        raise lost
    if not getattr(args, "quiet", False):   # (-q: stdout goes nowhere; the summary is not even made)
        from ..report.summary import run_summary

        print(run_summary(report, outputs.paths, args.report))
    return 0


def _say_selections(planned: list[Planned]) -> None:
    """Which atoms each analysis with a ``select`` option used, and its :attr:`Analysis.summary_notes`."""
    for p in planned:
        option = next((o for o in p.analysis.command.options if o.name == "select"), None)
        if option is not None:
            who = "selection" if len(planned) == 1 else f"{p.name} selection"
            said = f"{who}: {p.analysis.get_config().get(option.kw)!r}"
            if p.select_given is None:
                said += " (the default; --select to change)" if len(planned) == 1 else " (the default)"
            print(said)
        for note in p.analysis.summary_notes:
            print(note)


def _kept_when_interrupted(args) -> str:
    """What a stopped run leaves: an ensemble's finished trajectories, for ``--resume``; nothing otherwise."""
    from .run_ensemble import results_folder

    if not getattr(args, "ensemble", None) or not os.path.isdir(results_folder(args)):
        return "no partial output was kept"
    return f"the trajectories finished are kept in {results_folder(args)} (--resume goes on from them)"


def add_run_options(p) -> None:
    from .run_ensemble import add_options as add_ensemble_options

    add_h5md_options(p)
    p.add_argument("--executor", default="auto", choices=names(choosers=True),
                   help="where tasks run (default: auto: serial unless the work outweighs starting processes); "
                        + "; ".join(f"{t.name}: {t.summary}" for t in EXECUTORS.values() if not t.chooses))
    p.add_argument("-n", "--n-workers", type=positive_int, default=None,
                   help="workers for processes and dask (default: the CPU count); "
                        "under MPI the ranks are mpiexec's -n")
    p.add_argument("--tasks", type=positive_int, default=None,
                   help="number of frame blocks (default 4 per worker); tasks start on chunk boundaries, "
                        "so an H5MD file's chunks may allow fewer")
    add_executor_options(p)   # each executor's own, from its registry entry
    p.add_argument("--max-block-mb", type=float, default=128,   # planning.MAX_BLOCK_BYTES (not imported for --help)
                   help="most MB of frames a worker reads and maps at once (default 128): bounds memory")
    p.add_argument("--start", type=int, default=0,
                   help="first frame to analyse (default 0; negative counts from the end, as Python slices)")
    p.add_argument("--stop", type=int, default=None,
                   help="frame to stop before (default: after the last frame; negative counts from the end)")
    p.add_argument("--step", type=positive_int, default=1, help="analyse every STEP-th frame (default 1)")
    add_continuous_option(p)
    add_strict_option(p)
    p.add_argument("--out", default=None,
                   help="results file; its extension decides the format (see the formats above; "
                        "any other extension is refused before the run)")
    p.add_argument("--report", default=None, help="write the run report (JSON)")
    p.add_argument("--predict-from", action="append", default=None, metavar="REPORT.json",
                   help="in a scheduler's job with a time limit, predict this run's wall time from the report(s) "
                        "of the same work (as `trajscale report --predict` does) and say before it starts when "
                        "it would not finish in the time left; repeat for several reports")
    p.add_argument("--machine", default=None, metavar="PROFILE.json",
                   help="with --predict-from: the machine profile of `trajscale probe` to predict on")
    p.set_defaults(predicted_wall=predicted_wall, kept_when_interrupted=_kept_when_interrupted)
    add_overwrite(p)
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (none is drawn when stderr is not a terminal, or with -q)")
    from .follow import add_follow_options

    add_follow_options(p)
    add_ensemble_options(p)


def predicted_wall(args) -> float | None:
    """Seconds ``--predict-from``'s reports predict for this run (None: none given); asked only in a job."""
    if not getattr(args, "predict_from", None):
        return None
    from ..launch import current
    from ..report.fit import fit_reports
    from ..report.machine import Machine, this_machine
    from ..report.storage import predict_storage
    from .report import load_report

    executor = args.executor if args.executor in names(predicted=True) else None
    if executor is not None and EXECUTORS[executor].workers == "launcher":
        n = current().size or 1
    elif args.executor in names(workers=("one",)):   # (serial: one worker; not the chooser)
        n = 1
    else:   # (auto: the reports' own executor, on the workers a pool would start)
        n = args.n_workers or os.cpu_count() or 1
    here = this_machine()
    machine = Machine.load(args.machine) if args.machine else here
    model = fit_reports([load_report(p) for p in args.predict_from], executor, ran_on=here)
    return predict_storage(model, [n], machine).preds[0].t_wall


def _say_mpi_size(args) -> None:
    """``-n`` does not size an MPI job: say so, and say when the job is a single rank."""
    if args.executor not in EXECUTORS or EXECUTORS[args.executor].workers != "launcher" or args.n_workers is None:
        return
    from ..parallel import mpi_comm_world

    try:
        comm = mpi_comm_world()
    except Exception:   # noqa: BLE001 - no mpi4py: the executor itself names the problem
        return
    size = comm.Get_size()
    if comm.Get_rank() != 0 or size == args.n_workers:
        return
    if size == 1:
        log.warning("-n %d does not apply to --executor mpi: this job is a single rank; start %d ranks with "
                    "`mpiexec -n %d trajscale run ... --executor mpi`", args.n_workers, args.n_workers,
                    args.n_workers)
    else:
        log.warning("-n %d does not apply to --executor mpi: the job has the %d ranks mpiexec started",
                    args.n_workers, size)


def _write_report(report, path: str | None) -> None:
    """Writing the results and the report is the process's last phase ("write"), counted in the report."""
    if path:
        report.write(path, phase="write")
    else:
        report.add_to_phase("write")
