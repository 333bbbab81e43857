"""A user function as a whole ``trajscale.run`` process: the held-out set's fourth workload.

    python benchmarks/held_out_user.py [TOPOLOGY TRAJECTORY] [--executor serial] [-n N] [--report R.json]

Without files it runs on AdK in vacuum (MDAnalysisTests' PSF and DCD).

Per frame, the largest distance of any selected atom from the selection's centroid (a measure of how
far a solvated system spreads), vectorised over the frames of a block.  The function is defined in
this script (``__main__``), so it travels to workers by value, as a user's own function does.
"""

from __future__ import annotations

import argparse

import numpy as np


def spread(positions: np.ndarray, box: np.ndarray) -> np.ndarray:
    """(F,) largest distance from the frame's centroid, Å."""
    centred = positions - positions.mean(axis=1, keepdims=True)
    return np.sqrt(np.einsum("fij,fij->fi", centred, centred).max(axis=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("topology", nargs="?")
    ap.add_argument("trajectory", nargs="?")
    ap.add_argument("--select", default="all")
    ap.add_argument("--executor", default="serial")
    ap.add_argument("-n", "--n-workers", type=int, default=None)
    ap.add_argument("--report", default=None)
    ap.add_argument("--overwrite", action="store_true", help="(accepted for the runner; the report is replaced)")
    ap.add_argument("-q", action="store_true", help="(accepted for the runner)")
    a = ap.parse_args(argv)

    import trajscale
    from trajscale.analysis.user import PerFrame, per_frame

    if not (a.topology and a.trajectory):
        from MDAnalysisTests.datafiles import DCD, PSF

        a.topology, a.trajectory = PSF, DCD
    keywords = {"executor": a.executor}
    if a.n_workers:
        keywords["n_workers"] = a.n_workers
    result = trajscale.run(PerFrame(per_frame(spread), select=a.select), a.topology, a.trajectory, **keywords)
    if a.report:
        result.report.write(a.report, phase="write")
    if not a.q:
        print(f"spread of {len(result.values)} frames: largest {float(np.max(result.values)):.4g} A")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
