"""``trajscale run``: run an analysis on an executor and summarise where the time went."""

from __future__ import annotations

import logging

from ..errors import OutputError
from ..executor_registry import EXECUTORS, names
from .checks import add_overwrite, add_topology, check_outputs, check_topology, positive_int
from .options import (
    add_continuous_option,
    add_executor_options,
    add_h5md_options,
    add_strict_option,
    executor_options,
)

log = logging.getLogger("trajscale")


#: The CLI's fit selection when --select is not given (printed with the results).
DEFAULT_SELECT = "protein and name CA"
#: What --out writes for a per-frame series (the extension decides; analysis.results.SERIES).
SERIES_OUT = ".csv (frame, time, values), .npy (the same table), .h5/.hdf5/.npz (frames, times, values)"


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run an analysis (rmsd, rmsf, rgyr, average, rdf, contacts, distances)",
                       description="Split-apply-combine analysis on serial, processes, dask or mpi executors.")
    asub = p.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
    r = asub.add_parser("rmsd", help="RMSD after optimal superposition",
                        description="Time series of the RMSD of a selection after optimal superposition "
                                    f"onto a reference frame (MDAnalysis rms.RMSD semantics). --out: {SERIES_OUT}.")
    add_topology(r)
    r.add_argument("trajectories", nargs="+", help="H5MD file (fast path) or any trajectory MDAnalysis reads")
    r.add_argument("--select", default=None,
                   help=f"fit and RMSD selection (default {DEFAULT_SELECT!r}; the API's default is 'all', "
                        "as MDAnalysis's)")
    r.add_argument("--ref-frame", type=int, default=0,
                   help="reference frame (default 0; negative counts from the end)")
    r.add_argument("--groupselection", action="append", default=[], metavar="SEL", dest="groupselections",
                   help="extra group selection whose RMSD is reported after the fit (repeatable)")
    r.add_argument("--mass-weighted", action="store_true",
                   help="mass-weighted fit and group RMSDs (MDAnalysis's weights='mass')")
    r.add_argument("--allow-nan", action="store_true", help="NaN for frames with non-finite coordinates")
    add_run_options(r)
    r.set_defaults(func=main_rmsd)
    add_analysis_parsers(asub)


def _positional(p) -> None:
    add_topology(p)
    p.add_argument("trajectories", nargs="+", help="H5MD file (fast path) or any trajectory MDAnalysis reads")


def add_analysis_parsers(asub) -> None:
    """rmsf, rgyr, average, rdf, contacts, distances: MDAnalysis's names and parameters."""
    specs = {
        "rmsf": ("per-atom RMSF (rms.RMSF), optionally after a fit",
                 "--out: .csv (atom, rmsf), .npy (rmsf), .h5/.hdf5/.npz (rmsf, mean, atoms)"),
        "rgyr": ("mass-weighted radius of gyration per frame", f"--out: {SERIES_OUT}"),
        "average": ("average structure after superposition (align.AverageStructure)",
                    "--out: .pdb (CRYST1: the mean box), .npy (positions), .h5/.hdf5/.npz (positions, atoms, box)"),
        "rdf": ("radial distribution function (rdf.InterRDF)",
                "--out: .csv (r, rdf, count), .h5/.hdf5/.npz (bins, edges, count, rdf)"),
        "contacts": ("fraction of native contacts Q(t) (contacts.Contacts)", f"--out: {SERIES_OUT}"),
        "distances": ("per-frame distances between two selections (minimum image)", f"--out: {SERIES_OUT}"),
    }
    for name, (helptext, out) in specs.items():
        p = asub.add_parser(name, help=helptext, description=f"{helptext}. {out}.")
        _positional(p)
        if name in ("rmsf", "rgyr", "average"):
            p.add_argument("--select", default="protein and name CA", help="atoms (default: %(default)s)")
        if name in ("rmsf", "average"):
            p.add_argument("--fit-select", default=None, help="superpose these atoms on the reference first")
            p.add_argument("--ref-frame", type=int, default=0, help="reference frame (default 0)")
        if name in ("rdf", "contacts", "distances"):
            p.add_argument("--select1", required=True, help="selection A")
            p.add_argument("--select2", required=True, help="selection B")
        if name == "rdf":
            p.add_argument("--nbins", type=int, default=75, help="histogram bins (default 75)")
            p.add_argument("--range", type=float, nargs=2, default=(0.0, 15.0), metavar=("MIN", "MAX"),
                           help="distance range in Å (default 0 15)")
            p.add_argument("--exclusion-block", type=int, nargs=2, default=None, metavar=("NA", "NB"),
                           help="leave out pairs within blocks of NA x NB atoms")
            p.add_argument("--norm", choices=["rdf", "density", "none"], default="rdf",
                           help="normalisation, as InterRDF's norm (default: %(default)s)")
        if name == "contacts":
            p.add_argument("--radius", type=float, default=4.5, help="contact radius in Å (default 4.5)")
            p.add_argument("--method", choices=["hard_cut", "radius_cut"], default="hard_cut",
                           help="contact criterion, as Contacts' method (default: %(default)s)")
            p.add_argument("--ref-frame", type=int, default=0, help="reference frame (default 0)")
        if name == "distances":
            p.add_argument("--all-pairs", action="store_true",
                           help="all distances (N1 x N2) even when the selections have equal sizes")
        if name in ("contacts", "distances"):
            p.add_argument("--no-pbc", action="store_true",
                           help="plain distances, for a trajectory without periodic boundaries (by default "
                                "minimum image, and every frame must have a box)")
        add_run_options(p)
        p.set_defaults(func=main_analysis)


def build_analysis(args):
    """The Analysis a parsed ``run ANALYSIS`` command asks for."""
    from .. import analysis as a

    name = args.analysis
    if name == "rmsf":
        return a.RMSF(select=args.select, fit_select=args.fit_select, ref_frame=args.ref_frame)
    if name == "rgyr":
        return a.RadiusOfGyration(select=args.select)
    if name == "average":
        return a.AverageStructure(select=args.select, fit_select=args.fit_select, ref_frame=args.ref_frame)
    if name == "rdf":
        return a.RDF(args.select1, args.select2, nbins=args.nbins, range=tuple(args.range),
                     exclusion_block=args.exclusion_block, norm=args.norm)
    if name == "contacts":
        return a.Contacts(select=(args.select1, args.select2), radius=args.radius, method=args.method,
                          ref_frame=args.ref_frame, pbc=not args.no_pbc)
    return a.Distances(args.select1, args.select2, pairs=False if args.all_pairs else None, pbc=not args.no_pbc)


def run_options(args, trajectory):
    """The one :class:`~trajscale.runspec.RunOptions` of a ``run ANALYSIS`` command, followed or not."""
    from ..runspec import RunOptions
    from .follow import follow_options

    follow = follow_options(args, trajectory)   # None unless --follow or a stream
    # off a terminal, progress is a line per 10 %; a followed run's tasks come a round at a time
    quiet = args.no_progress or getattr(args, "quiet", False) or follow is not None
    return RunOptions(executor=args.executor, n_workers=args.n_workers, n_tasks=args.tasks, start=args.start,
                      stop=args.stop, step=args.step, max_block_bytes=int(args.max_block_mb * 1024**2),
                      progress=not quiet, group=args.h5md_group, assume_units=args.assume_units,
                      continuous=args.continuous, follow=follow, executor_options=executor_options(args))


def _run(analysis, args):
    """``trajscale.run`` with the options every ``run ANALYSIS`` command shares; a followed run saves
    --out and --report as its results grow (:func:`.follow.publisher`)."""
    from ..run import run
    from .follow import publisher, refuse_options_without_effect

    traj = args.trajectories[0] if len(args.trajectories) == 1 else args.trajectories
    refuse_options_without_effect(args, traj)
    _import_dependencies()
    options = run_options(args, traj)
    on_update = publisher(args) if options.follow is not None else None
    return run(analysis, args.topology, traj, options=options, on_update=on_update)


def check_run_outputs(args, analysis) -> None:
    """Before any work: neither --out nor --report is an input (topology, trajectories) or, without
    --overwrite, an existing file; --out's extension names a format the analysis writes."""
    check_outputs(args.out, args.report, inputs=[args.topology, *args.trajectories], overwrite=args.overwrite)
    if args.out:
        from ..analysis.results import output_format

        output_format(args.out, analysis.formats, analysis.name)


def main_analysis(args) -> int:
    check_topology(args)
    analysis = build_analysis(args)
    check_run_outputs(args, analysis)
    _say_mpi_size(args)
    result = _run(analysis, args)
    if result is None:   # an MPI rank other than 0
        return 0
    if result.report.meta.follow is not None:   # saved as it grew, the last time when it ended
        from .follow import finish

        return finish(result, args)
    lost = None   # an output that could not be written: the other is still written, then this raised
    if args.out:
        try:
            if args.analysis == "average" and args.out.lower().endswith(".pdb"):
                from ..topology import load_universe

                result.save(args.out, universe=load_universe(args.topology, topology_coordinates=False))
            else:
                result.save(args.out)
        except OutputError as exc:
            lost = exc
    try:
        _write_report(result.report, args.report)
    except OutputError as exc:
        lost = lost or exc
    if lost is not None:
        raise lost
    print(summary(result.report, args.out, args.report))
    return 0


def add_run_options(p) -> None:
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
    p.add_argument("--max-block-mb", type=float, default=256,
                   help="most MB of frames a worker reads and maps at once (default 256): bounds memory")
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
    add_overwrite(p)
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (none is drawn when stderr is not a terminal, or with -q)")
    from .follow import add_follow_options

    add_follow_options(p)


def _import_dependencies() -> None:
    """Load the compiled kernels before the run's clock starts, as a script does at its top: the
    report then times the run, not the interpreter (on every MPI rank).  MDAnalysis is not imported
    here: a run whose selections are cached never needs it (:class:`trajscale.topology.CachedUniverse`)."""
    from ..kernels import superpose  # noqa: F401


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


def main_rmsd(args) -> int:
    from ..analysis import RMSD

    check_topology(args)
    default = "" if args.select is not None else " (the default; --select to change)"
    args.select = DEFAULT_SELECT if args.select is None else args.select
    analysis = RMSD(select=args.select, ref_frame=args.ref_frame, groupselections=args.groupselections,
                    weights="mass" if args.mass_weighted else None, allow_nan=args.allow_nan)
    check_run_outputs(args, analysis)   # before any work: a bad path fails in a second, not after the run
    _say_mpi_size(args)
    result = _run(analysis, args)
    if result is None:   # an MPI rank other than 0
        return 0
    print(f"selection: {args.select!r}{default}")
    if result.report.meta.follow is not None:   # saved as it grew, the last time when it ended
        from .follow import finish

        return finish(result, args)
    if args.out:
        result.save(args.out)
    _write_report(result.report, args.report)
    print(summary(result.report, args.out, args.report))
    return 0


def _write_report(report, path: str | None) -> None:
    """Writing the results and the report is the process's last phase ("write"), counted in the report."""
    if path:
        report.write(path, phase="write")
    else:
        report.add_to_phase("write")


def summary(report, out: str | None = None, report_path: str | None = None) -> str:
    """The one-screen summary printed after every run."""
    from ..report.summary import run_summary

    return run_summary(report, out, report_path)
