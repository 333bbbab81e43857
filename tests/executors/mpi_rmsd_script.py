"""Run the RMSD under MPI from a script (``mpiexec -n N python mpi_rmsd_script.py ...``).

Rank 0 writes ``--out`` (an NPZ with the result table and per-worker timings);
other ranks write nothing.  ``--fail-frames A:B`` runs an analysis whose map
raises on blocks touching frames [A, B), to test that a rank's failure aborts
the job.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

import trajscale as ts
from trajscale.analysis import ANALYSES, RMSD


class FailingRMSD(RMSD):
    """An RMSD whose map raises on blocks overlapping ``[fail_start, fail_stop)``."""

    name = "failing_rmsd"

    def __init__(self, fail_start: int = 0, fail_stop: int = 0, **kw) -> None:
        super().__init__(**kw)
        self.fail_start, self.fail_stop = fail_start, fail_stop

    def get_config(self) -> dict:
        return {**super().get_config(), "name": self.name, "fail_start": self.fail_start,
                "fail_stop": self.fail_stop}

    def map(self, block, prep):
        if block.start < self.fail_stop and self.fail_start < block.stop:
            raise RuntimeError(f"injected failure on frames [{block.start}, {block.stop})")
        return super().map(block, prep)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("topology")
    p.add_argument("trajectory")
    p.add_argument("--out", required=True)
    p.add_argument("--driver", choices=["mpio", "default", "auto"], default="auto")
    p.add_argument("--collective", action="store_true")
    p.add_argument("--tasks", type=int, default=None)
    p.add_argument("--select", default="name CA")
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--fail-frames", default=None)
    args = p.parse_args(argv)

    kw = {"select": args.select, "groupselections": args.group}
    if args.fail_frames:
        a, b = (int(x) for x in args.fail_frames.split(":"))
        ANALYSES[FailingRMSD.name] = FailingRMSD   # every rank runs this line
        analysis = FailingRMSD(a, b, **kw)
    else:
        analysis = RMSD(**kw)
    from trajscale.executors.mpi import MPIExecutor

    driver = None if args.driver == "default" else args.driver
    if args.driver == "auto":   # by name, as users write it
        r = ts.run(analysis, args.topology, args.trajectory, executor="mpi", n_tasks=args.tasks,
                   collective=args.collective)
        opts = MPIExecutor().source_options
    else:
        with MPIExecutor(driver=driver, collective=args.collective) as ex:
            r = ts.run(analysis, args.topology, args.trajectory, executor=ex, n_tasks=args.tasks)
            opts = ex.source_options
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_rank() != 0:
        assert r is None
        return 0
    report = r.report
    np.savez(args.out, table=r.table(), n_workers=report.n_workers,
             workers=json.dumps([w.worker for w in report.workers]),
             report=json.dumps(report.to_dict()), options=json.dumps(opts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
