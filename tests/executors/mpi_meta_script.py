"""Under ``mpiexec -n N``: which frames' box/time/step each rank read, and the progress lines.

Rank 0 writes ``--out`` (JSON): the per-rank list of metadata reads ``(start, stop)`` and the RMSD.
"""

from __future__ import annotations

import argparse
import json
import logging

import trajscale as ts
from trajscale import progress
from trajscale.executors.mpi import MPIExecutor
from trajscale.h5md.source import H5MDSource

READS: list[tuple[int, int]] = []
_orig = H5MDSource._frame_meta_uncached


def _counting(self, start, stop):
    READS.append((int(start), int(stop)))
    return _orig(self, start, stop)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("topology")
    p.add_argument("trajectory")
    p.add_argument("--out", required=True)
    p.add_argument("--tasks", type=int, default=8)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="trajscale: %(message)s")
    H5MDSource._frame_meta_uncached = _counting
    progress.PROGRESS_LINE_DELAY = 0.0   # print every tenth even for this short run
    ex = MPIExecutor()
    r = ts.run(ts.RMSD(select="name CA"), args.topology, args.trajectory, executor=ex,
               n_tasks=args.tasks, progress=True)
    reads = ex.comm.gather(READS, root=0)
    if ex.is_root:
        with open(args.out, "w") as fh:
            json.dump({"reads": reads, "rmsd": r.rmsd.tolist()}, fh)


if __name__ == "__main__":
    main()
