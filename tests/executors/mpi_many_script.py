"""``mpiexec -n N python mpi_many_script.py TOP OUT.json TRAJ[:N_TASKS] ...``: CA RMSD on N ranks, once per TRAJ.

The runs share one launch (starting many ranks on a small machine costs more than the runs). For each run,
rank 0 writes the RMSD, every rank's record (files opened, topology time), every task's frames and worker,
and each rank's peak RSS so far (``ru_maxrss``, gathered here: the report does not hold it) to OUT.json, a
list in the order of the TRAJ arguments.
"""

from __future__ import annotations

import json
import resource
import sys

import trajscale as ts


def one_run(top: str, traj: str, n_tasks: int | None) -> dict | None:
    r = ts.run(ts.RMSD(select="name CA"), top, traj, executor="mpi", n_tasks=n_tasks)
    from mpi4py import MPI

    rss = MPI.COMM_WORLD.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, root=0)
    # A rank that parsed a topology has imported MDAnalysis's Universe; only the root should have.
    mda = MPI.COMM_WORLD.gather("MDAnalysis.core.universe" in sys.modules, root=0)
    if r is None:
        return None
    rep = r.report.to_dict(diagnosis=False)
    return {"rmsd": [float(x) for x in r.rmsd], "workers": rep["workers"], "peak_rss": rss, "mdanalysis": mda,
            "tasks": [{k: t[k] for k in ("worker", "start", "stop", "files")} for t in rep["tasks"]]}


def main(argv: list[str]) -> int:
    top, out, *runs = argv
    got = []
    for run in runs:
        traj, _, n_tasks = run.partition(":")
        got.append(one_run(top, traj, int(n_tasks) if n_tasks else None))
    if got[0] is not None:
        with open(out, "w") as fh:
            json.dump(got, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
