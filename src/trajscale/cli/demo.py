"""``trajscale demo``: sample data from a real system, a parallel analysis, its report and plots."""

from __future__ import annotations

from ..executor_registry import names
from .checks import positive_int


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="build sample data from AdK in water and run a parallel RMSD",
                       description="Build a few-thousand-frame H5MD trajectory of the 47,681-atom AdK-in-water "
                                   "system from MDAnalysisTests (protein made whole, planned layout), time the "
                                   "trajscale CLI against the same RMSD as an MDAnalysis script (whole processes, "
                                   "cold on both sides), run the CA RMSD on a parallel executor, and write CSV, "
                                   "report and plots.")
    p.add_argument("--workdir", default="demo-output", help="where data and outputs go (default demo-output)")
    p.add_argument("--frames", type=int, default=2000, help="frames in the demo file (default 2000)")
    p.add_argument("-n", "--n-workers", type=positive_int, default=2, help="workers (default 2)")
    p.add_argument("--executor", default="processes", choices=names(workers=("one", "n_workers")),
                   help="where the RMSD runs (default: %(default)s)")
    p.add_argument("--no-compare", action="store_true",
                   help="skip the whole-process timing of the trajscale CLI against an MDAnalysis script")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..demo import run_demo

    return run_demo(args.workdir, args.frames, args.n_workers, args.executor, compare=not args.no_compare,
                    progress=not args.quiet)
