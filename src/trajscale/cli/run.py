"""``trajscale run``: run an analysis on an executor and summarise where the time went."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run an analysis (rmsd) on an executor",
                       description="Split-apply-combine analysis on serial, processes, dask or mpi executors.")
    asub = p.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
    r = asub.add_parser("rmsd", help="RMSD after optimal superposition",
                        description="Time series of the RMSD of a selection after optimal superposition "
                                    "onto a reference frame (MDAnalysis rms.RMSD semantics).")
    r.add_argument("topology", help="topology file (TPR, PSF, GRO, PDB, ...)")
    r.add_argument("trajectories", nargs="+", help="H5MD file (fast path) or any trajectory MDAnalysis reads")
    r.add_argument("--select", default="protein and name CA", help="fit and RMSD selection")
    r.add_argument("--ref-frame", type=int, default=0, help="reference frame (default 0)")
    r.add_argument("--group", action="append", default=[], metavar="SEL",
                   help="extra group selection whose RMSD is reported after the fit (repeatable)")
    r.add_argument("--mass-weighted", action="store_true", help="mass-weighted fit")
    r.add_argument("--allow-nan", action="store_true", help="NaN for frames with non-finite coordinates")
    add_run_options(r)
    r.set_defaults(func=main_rmsd)


def add_run_options(p) -> None:
    p.add_argument("--executor", default="auto", choices=["auto", "serial", "processes", "dask", "mpi"],
                   help="where tasks run; auto: serial unless the work outweighs starting processes")
    p.add_argument("-n", "--n-workers", type=int, default=None, help="workers (processes, dask)")
    p.add_argument("--tasks", type=int, default=None, help="number of frame blocks (default 4 per worker)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address (tcp://host:port)")
    p.add_argument("--collective", action="store_true", help="collective MPI-IO reads (mpi executor)")
    p.add_argument("--driver", default=None, choices=["mpio", "default"],
                   help="HDF5 driver on MPI ranks (default: mpio where h5py has MPI)")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--stop", type=int, default=None)
    p.add_argument("--out", default=None, help="CSV output")
    p.add_argument("--report", default=None, help="write the run report (JSON)")
    p.add_argument("--no-progress", action="store_true")


def executor_options(args) -> dict:
    opts = {}
    if args.executor == "dask" and args.scheduler:
        opts["scheduler"] = args.scheduler
    if args.executor == "mpi":
        if args.collective:
            opts["collective"] = True
        if args.driver:
            opts["driver"] = None if args.driver == "default" else args.driver
    return opts


def _import_dependencies() -> None:
    """Import MDAnalysis and load the compiled kernels before the run's clock starts, as a script
    does at its top: the report then times the run, not the interpreter (on every MPI rank)."""
    import MDAnalysis  # noqa: F401

    from ..kernels.superpose import preload_kernels

    preload_kernels()


def main_rmsd(args) -> int:
    from ..analysis import RMSD
    from ..run import run

    analysis = RMSD(select=args.select, ref_frame=args.ref_frame, groupselections=args.group,
                    weights="mass" if args.mass_weighted else None, allow_nan=args.allow_nan)
    traj = args.trajectories[0] if len(args.trajectories) == 1 else args.trajectories
    _import_dependencies()
    result = run(analysis, args.topology, traj, executor=args.executor, n_workers=args.n_workers,
                 n_tasks=args.tasks, start=args.start, stop=args.stop,
                 progress=not args.no_progress and sys.stderr.isatty(), **executor_options(args))
    if result is None:   # an MPI rank other than 0
        return 0
    if args.out:
        result.to_csv(args.out)
    if args.report:
        result.report.write(args.report)
    print(summary(result.report, args.out, args.report))
    return 0


def summary(report, out: str | None = None, report_path: str | None = None) -> str:
    """The one-screen summary printed after every run."""
    try:
        from ..report.summary import short_report

        tail = "\n" + short_report(report)
    except ImportError:
        tail = ""
    gb = report.bytes_read / 1e9
    t = report.t_total
    lines = [
        (f"{report.analysis} on {report.executor} x{report.n_workers}: {report.n_frames} frames x "
         f"{report.n_atoms} atoms read in {report.n_tasks} tasks"),
        f"  {t:.2f} s total, {report.n_frames / t:,.0f} frames/s, {gb / t:.2f} GB/s read ({gb:.3f} GB)",
    ]
    t_io = sum(tk.t_io for tk in report.tasks)
    if t_io > 0:   # the storage's speed as the tasks saw it, apart from start-up and compute
        lines[-1] += f"; reads ran at {gb / t_io:.2f} GB/s per worker"
    choice = report.meta.get("executor_choice") if isinstance(report.meta, dict) else None
    if choice:
        lines.append(f"  executor {choice}")
    if out:
        lines.append(f"  results: {out}")
    if report_path:
        lines.append(f"  report:  {report_path}")
    return "\n".join(lines) + tail
