"""``mpiexec -n N python mpi_many_script.py TOP TRAJ OUT.json [N_TASKS]``: CA RMSD on N ranks.

Rank 0 writes the RMSD, every rank's record (files opened, topology time), every task's frames and
worker, and each rank's peak RSS (``ru_maxrss``, gathered here: the report does not hold it).
"""

from __future__ import annotations

import json
import resource
import sys

import trajscale as ts


def main(argv: list[str]) -> int:
    top, traj, out, *rest = argv
    n_tasks = int(rest[0]) if rest else None
    r = ts.run(ts.RMSD(select="name CA"), top, traj, executor="mpi", n_tasks=n_tasks)
    from mpi4py import MPI

    rss = MPI.COMM_WORLD.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, root=0)
    # A rank that parsed a topology has imported MDAnalysis's Universe; only the root should have.
    mda = MPI.COMM_WORLD.gather("MDAnalysis.core.universe" in sys.modules, root=0)
    if r is not None:
        rep = r.report.to_dict(diagnosis=False)
        with open(out, "w") as fh:
            json.dump({"rmsd": [float(x) for x in r.rmsd], "workers": rep["workers"], "peak_rss": rss,
                       "mdanalysis": mda,
                       "tasks": [{k: t[k] for k in ("worker", "start", "stop", "files")} for t in rep["tasks"]]},
                      fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
