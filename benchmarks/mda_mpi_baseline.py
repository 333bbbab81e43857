"""Baseline: MDAnalysis's own H5MD reader under MPI with the seed's split-apply-combine loop.

Run as ``mpiexec -n N python benchmarks/mda_mpi_baseline.py TOPOLOGY FILE.h5md --out result.json``.
Every rank builds the Universe, opens the trajectory with ``driver="mpio"``
on COMM_WORLD, takes its balanced contiguous block of frames (the seed's
``make_balanced_slices``), loops over them one frame at a time computing
``MDAnalysis.analysis.rms.rmsd(CA.positions, ref, center=True,
superposition=True)``, and the RMSD values are gathered to rank 0 with
``Gatherv``.  Rank 0 writes the total time and per-rank phase times (seed 000,
Table 3) as JSON.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from pathlib import Path

import numpy as np


def make_balanced_slices(n_frames: int, n_blocks: int, start: int = 0, stop: int | None = None,
                         step: int = 1) -> list[slice]:
    """Contiguous, balanced slices of ``range(start, stop, step)`` (the seed's helper)."""
    stop = n_frames if stop is None else stop
    n = len(range(start, stop, step))
    base, extra = divmod(n, n_blocks)
    out, first = [], start
    for i in range(n_blocks):
        k = base + (1 if i < extra else 0)
        out.append(slice(first, first + k * step, step))
        first += k * step
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("topology")
    p.add_argument("trajectory")
    p.add_argument("--select", default="protein and name CA")
    p.add_argument("--driver", default="mpio", choices=["mpio", "default"])
    p.add_argument("--out", required=True, help="JSON written by rank 0")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    args = p.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore")
    import MDAnalysis as mda
    from MDAnalysis.analysis.rms import rmsd
    from mpi4py import MPI

    from trajscale.errors import OutputError
    from trajscale.util import atomic_output, check_output_path

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    problem = None
    if rank == 0:   # refused before the run, on every rank, said once
        try:
            check_output_path(args.out, overwrite=args.overwrite)
        except OutputError as exc:
            problem = f"{Path(__file__).name}: {exc}"
    problem = comm.bcast(problem, root=0)
    if problem:
        raise SystemExit(problem if rank == 0 else 1)
    comm.Barrier()
    t_start = time.perf_counter()
    u = mda.Universe(args.topology)
    t_top = time.perf_counter()
    kw = {"driver": "mpio", "comm": comm} if args.driver == "mpio" else {}
    u.load_new(args.trajectory, format="H5MD", **kw)
    ca = u.select_atoms(args.select)
    t_traj = time.perf_counter()
    u.trajectory[0]
    ref = ca.positions.copy()
    sl = make_balanced_slices(u.trajectory.n_frames, size)[rank]
    out = np.empty(len(range(sl.start, sl.stop, sl.step)), dtype=np.float64)
    t_io = t_comp = 0.0
    t0 = time.perf_counter()
    for i, _ts in enumerate(u.trajectory[sl]):
        t1 = time.perf_counter()
        out[i] = rmsd(ca.positions, ref, center=True, superposition=True)
        t2 = time.perf_counter()
        t_io += t1 - t0
        t_comp += t2 - t1
        t0 = time.perf_counter()
    t_w0 = time.perf_counter()
    comm.Barrier()
    t_w1 = time.perf_counter()
    counts = comm.allgather(len(out))
    result = np.empty(sum(counts)) if rank == 0 else None
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
    comm.Gatherv(out, [result, counts, displs, MPI.DOUBLE] if rank == 0 else None, root=0)
    t_end = time.perf_counter()
    times = {"worker": f"rank {rank}", "host": socket.gethostname(), "frames": len(out),
             "t_init_top": t_top - t_start, "t_init_traj": t_traj - t_top, "t_io": t_io,
             "t_compute": t_comp, "t_wait": t_w1 - t_w0, "t_comm": t_end - t_w1}
    all_times = comm.gather(times, root=0)
    u.trajectory.close()
    if rank == 0:
        try:   # a temporary name, fsync, rename: a reader never sees half of it
            with atomic_output(args.out, overwrite=args.overwrite) as tmp:
                tmp.write_text(json.dumps({"n_ranks": size, "n_frames": int(sum(counts)), "t_total": t_end - t_start,
                                           "rmsd_first": result[:5].tolist(), "rmsd_mean": float(result.mean()),
                                           "workers": all_times}, indent=1))
        except OutputError as exc:   # appeared while we measured
            raise SystemExit(f"{Path(__file__).name}: {exc}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
