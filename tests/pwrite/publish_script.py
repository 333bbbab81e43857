"""A producer that writes N frames with ParallelWriter, says so, then waits to be killed (test_publish.py).

usage: publish_script.py OUT N [mpi] [nopublish]

Each rank prints ``pid P``; rank 0 prints ``wrote K`` after each ``write()`` returns, then
``waiting`` once all N are written, and every rank sleeps until the test kills it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from trajscale import ParallelWriter

N_ATOMS = 5_000


def frame(i: int) -> np.ndarray:
    """Frame i in global atom order (the test regenerates it)."""
    return np.random.default_rng(i).random((N_ATOMS, 3), dtype=np.float32) * 50


def main() -> None:
    out, n = sys.argv[1], int(sys.argv[2])
    comm = None
    if "mpi" in sys.argv[3:]:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    print(f"pid {os.getpid()}", flush=True)
    ids = np.arange(rank, N_ATOMS, size)   # a scattered share of the atoms per rank
    w = ParallelWriter(out, N_ATOMS, comm=comm, strategy="gather", chunks=1,   # the default publishes
                       **({"publish": False} if "nopublish" in sys.argv[3:] else {}))
    for i in range(n):
        w.write(step=i, time=float(i), ids=ids, positions=frame(i)[ids], box=[50, 50, 50, 90, 90, 90])
        if rank == 0:
            print(f"wrote {i + 1}", flush=True)
    if rank == 0:
        print("waiting", flush=True)
    time.sleep(600)   # never closed: the test kills this process


if __name__ == "__main__":
    main()
