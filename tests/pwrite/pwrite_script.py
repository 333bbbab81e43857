"""Run ParallelWriter under mpiexec (driven by test_parallel_writer.py).

usage: pwrite_script.py equal OUTDIR      every strategy, write() and write_frames()
       pwrite_script.py one OUTDIR STRATEGY[,STRATEGY...]  those strategies only: STRATEGY.h5md and
                                                        frames-STRATEGY.h5md for each
       pwrite_script.py bad OUTDIR        every bad input; each rank writes what it raised
       pwrite_script.py kill OUT STRATEGY write frames until killed, printing each commit
       pwrite_script.py exists OUT        OUT exists: refused by default, replaced with overwrite=True
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
from mpi4py import MPI

from tests.pwrite.frames import adk_frames, owned
from trajscale import ParallelWriter
from trajscale.errors import TrajscaleError

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def write_domains(path, data, strategy, compression=None, topology=None, **kw):
    n_frames, n_atoms = data["positions"].shape[:2]
    with ParallelWriter(path, n_atoms, comm=comm, strategy=strategy, compression=compression,
                        velocities=True, forces=True, topology=topology, **kw) as w:
        for i in range(n_frames):
            ids = owned(i, n_atoms, size, rank)
            w.write(step=data["step"][i], time=data["time"][i], box=data["box"][i], ids=ids,
                    positions=data["positions"][i][ids], velocities=data["velocities"][i][ids],
                    forces=data["forces"][i][ids])


def write_blocks(path, data, strategy, compression=None, topology=None):
    """Frame-parallel: rank r writes blocks of 2 frames, the ranks' blocks in reverse order."""
    n_frames, n_atoms = data["positions"].shape[:2]
    blocks = [(a, min(a + 2, n_frames)) for a in range(0, n_frames, 2)]
    with ParallelWriter(path, n_atoms, comm=comm, strategy=strategy, compression=compression,
                        velocities=True, forces=True, topology=topology) as w:
        for j in range(0, len(blocks), size):
            mine = blocks[j:j + size][::-1]
            a, b = mine[rank] if rank < len(mine) else (0, 0)
            s = slice(a, b)
            w.write_frames(a, data["positions"][s], step=data["step"][s], time=data["time"][s],
                           box=data["box"][s], velocities=data["velocities"][s], forces=data["forces"][s])


def frames(n_frames: int | None = None) -> dict:
    """:func:`adk_frames` read by rank 0 and broadcast: the other ranks need not import MDAnalysis."""
    return comm.bcast((adk_frames() if n_frames is None else adk_frames(n_frames)) if rank == 0 else None, root=0)


def topology():
    """AdK's PSF as a Universe on rank 0 (whose atoms the writer broadcasts); None elsewhere: the other ranks
    need not import MDAnalysis (a second of CPU each)."""
    if rank != 0:
        return None
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import PSF

    return mda.Universe(PSF)


def equal(outdir: Path):
    data = frames()
    top = topology()
    for strategy in ("gather", "independent", "collective"):
        write_domains(outdir / f"{strategy}.h5md", data, strategy, topology=top)
        write_blocks(outdir / f"frames-{strategy}.h5md", data, strategy, topology=top)
    for strategy in ("gather", "collective"):   # compressed data is written collectively
        write_domains(outdir / f"{strategy}-gzip.h5md", data, strategy, compression="gzip:1", topology=top)
    write_blocks(outdir / "frames-collective-gzip.h5md", data, "collective", compression="gzip:1", topology=top)
    # h5py without MPI: gather still works (rank 0 writes with HDF5's default driver)
    import trajscale.pwrite.writer as pw

    pw.h5py_has_mpi = lambda: False
    write_domains(outdir / "gather-nompio.h5md", data, "gather", topology=top)
    write_blocks(outdir / "frames-gather-nompio.h5md", data, "gather", topology=top)


def bad(outdir: Path):
    data = frames(3)
    n_atoms = data["positions"].shape[1]
    last = size - 1
    out = {}

    def case(name, fn):
        path = outdir / f"{name}.h5md"
        try:
            fn(path)
            out[name] = None
        except TrajscaleError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"

    def domains(path, strategy, tamper, check=False, good_frames=0):
        with ParallelWriter(path, n_atoms, comm=comm, strategy=strategy, check=check) as w:
            for i in range(3):
                ids = owned(i, n_atoms, size, rank)
                pos = data["positions"][i][ids]
                if i >= good_frames:
                    ids, pos = tamper(i, ids, pos)
                w.write(step=i, time=float(i), ids=ids, positions=pos)

    def dup(i, ids, pos):   # the last rank also sends an atom some rank already sent
        if rank == last:
            extra = owned(i, n_atoms, size, 0)[:2] if size > 1 else ids[:2]
            return np.concatenate([ids, extra]), np.concatenate([pos, pos[:2]])
        return ids, pos

    def missing(i, ids, pos):
        return (ids[:-2], pos[:-2]) if rank == last else (ids, pos)

    def shape(i, ids, pos):
        return (ids, pos[:, :2]) if rank == last else (ids, pos)

    def nan(i, ids, pos):
        if rank == last:
            pos = pos.copy()
            pos[[3, 5]] = np.nan
        return ids, pos

    for strategy in ("gather", "independent", "collective"):
        for name, tamper in (("dup", dup), ("missing", missing), ("shape", shape)):
            case(f"{name}-{strategy}", lambda p, t=tamper, s=strategy: domains(p, s, t))
        case(f"nan-{strategy}", lambda p, s=strategy: domains(p, s, nan, check=True))
        case(f"nan-unchecked-{strategy}", lambda p, s=strategy: domains(p, s, nan))
        case(f"late-{strategy}", lambda p, s=strategy: domains(p, s, missing, good_frames=2))

    def overlap(path):
        with ParallelWriter(path, n_atoms, comm=comm) as w:
            s = slice(0, 2)   # every rank writes frames 0-1
            w.write_frames(0, data["positions"][s], step=data["step"][s], time=data["time"][s])

    def frame_shape(path):
        with ParallelWriter(path, n_atoms, comm=comm) as w:
            s = slice(rank, rank + 1)
            pos = data["positions"][s][:, :-1] if rank == last else data["positions"][s]
            w.write_frames(rank, pos, step=data["step"][s], time=data["time"][s])

    case("frames-overlap", overlap)
    case("frames-shape", frame_shape)
    import trajscale.pwrite.writer as pw

    pw.h5py_has_mpi = lambda: False
    case("nompio-collective", lambda p: domains(p, "collective", lambda i, a, b: (a, b)))
    (outdir / f"bad-rank{rank}.json").write_text(json.dumps(out))


def exists(out: Path):
    """Each rank records what the default raised, then frame 0 is written with ``overwrite=True``."""
    data = frames(1)
    n_atoms = data["positions"].shape[1]
    ids = owned(0, n_atoms, size, rank)
    got = {}
    try:
        with ParallelWriter(out, n_atoms, comm=comm) as w:
            w.write(step=0, time=0.0, ids=ids, positions=data["positions"][0][ids])
        got["default"] = None
    except TrajscaleError as exc:
        got["default"] = f"{type(exc).__name__}: {exc}"
    got["size_after_refusal"] = out.stat().st_size
    comm.Barrier()   # every rank has looked at the untouched file before it is replaced
    with ParallelWriter(out, n_atoms, comm=comm, overwrite=True) as w:
        w.write(step=0, time=0.0, ids=ids, positions=data["positions"][0][ids])
    (out.parent / f"exists-rank{rank}.json").write_text(json.dumps(got))


def kill(out: Path, strategy: str):
    n_atoms = 200_000
    rng = np.random.default_rng(5)
    base = rng.random((n_atoms, 3), dtype=np.float32) * 100
    print(f"pid {os.getpid()}", flush=True)
    comm.Barrier()
    with ParallelWriter(out, n_atoms, comm=comm, strategy=strategy) as w:
        i = 0
        while True:
            ids = owned(i, n_atoms, size, rank)
            w.write(step=i, time=0.5 * i, box=[100, 100, 100, 90, 90, 90], ids=ids,
                    positions=base[ids] + np.float32(i))
            if rank == 0:
                print(f"committed {w.n_frames}", flush=True)
            i += 1


if __name__ == "__main__":
    mode, target = sys.argv[1], Path(sys.argv[2])
    if mode == "equal":
        equal(target)
    elif mode == "one":   # many ranks on a small machine: the named strategies, without the gzip and no-MPI-IO cases
        top, data = topology(), frames()
        for strategy in sys.argv[3].split(","):
            write_domains(target / f"{strategy}.h5md", data, strategy, topology=top)
            write_blocks(target / f"frames-{strategy}.h5md", data, strategy, topology=top)
    elif mode == "bad":
        bad(target)
    elif mode == "exists":
        exists(target)
    else:
        kill(target, sys.argv[3])
