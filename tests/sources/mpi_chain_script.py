"""``mpiexec -n 2 python mpi_chain_script.py TOP OUT.json PART...``: CA RMSD over a chain of parts on MPI.

Rank 0 writes the RMSD and every task's worker, frames and the files it opened.
"""

from __future__ import annotations

import json
import sys

import trajscale as ts


def main(argv: list[str]) -> int:
    top, out, *parts = argv
    r = ts.run(ts.RMSD(select="name CA"), top, parts, executor="mpi", n_tasks=4)
    if r is not None:
        tasks = [{"worker": t.worker, "start": t.start, "stop": t.stop, "files_opened": t.files_opened}
                 for t in r.report.tasks]
        with open(out, "w") as fh:
            json.dump({"rmsd": [float(x) for x in r.rmsd], "tasks": tasks}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
