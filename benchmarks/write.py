"""Parallel H5MD writing (seed 004): gather / independent / collective against serial writers.

    python benchmarks/write.py [--replicas 3] [--frames 3] [--ranks 1,2,3] [--out-dir DIR] [--json OUT]
                               [--visibility-atoms 111815] [--visibility-frames 100] [--visibility-only]

The system is AdK in water (MDAnalysisTests GRO/XTC, 47,681 atoms) replicated
``replicas``^3 times in a grid (3 -> 27 copies, 1,287,387 atoms, 15.4 MB per
frame).  Frame i is the XTC's frame i mod 10, shifted along x by 0.7 Å per
frame so atoms migrate between domains.  Ranks own spatial slabs along x (the
seed's equi-spatial domain decomposition); each rank's atoms are in no
particular order, as an MD code holds them (about 41,000 runs of consecutive
ids per rank at 2 or 3 ranks).

What is timed: from a barrier before the first frame to the closed file, for
``--frames`` frames (every frame committed: data flushed, then step/time
grown), slowest rank; MB/s = frames x n_atoms x 12 bytes / that time.  Building
each rank's arrays is not timed.  Serial baselines, in this process, on the same
frames in global order: an ASCII XYZ writer (one ``%.4f %.4f %.4f`` line per
atom, NumPy ``savetxt``; with element names it is 10x slower), a raw float32
binary writer (``ndarray.tofile``, the
seed's native binary) and MDAnalysis's H5MDWriter.  Files go to ``--out-dir``
(default: a temporary directory) and are deleted after each run; on a machine
with a lot of memory they stay in the page cache, so this measures the
writers, not the disk - except that parallel HDF5 flushes with
``MPI_File_sync`` (an fsync) and trajscale flushes twice per frame, for crash
consistency (the data, then the frame count that publishes it).

Publishing (``--visibility-*``): what it costs that a frame ``ParallelWriter.write()`` has returned
is in the file (``publish=True``, the default: one more flush per frame, so a follower sees the frame
at once and a killed producer leaves it), and what ``durable=True`` (an fsync per frame; under MPI-IO the
flushes are ``MPI_File_sync`` already, so there it is the default's cost again) adds: YiiP-sized
frames (111,815 atoms, 1.34 MB) written one ``write()`` at a time (strategy gather, one frame per chunk,
as a simulation's producer writes them), serially and under ``mpiexec -n 2``, each mode run
``--visibility-repeat`` times in turn (median). MB/s = frames x atoms x 12 bytes / the time from the
first write to the closed file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _script_output import check_script_output, write_script_json

PROG = Path(__file__).name

STRATEGIES = ("gather", "independent", "collective")


def system(replicas: int):
    """Replicated AdK-in-water frames: (10, N, 3) float32 and the box."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import GRO, XTC

    u = mda.Universe(GRO, XTC)
    base = np.array([ts.positions.copy() for ts in u.trajectory], dtype=np.float32)
    box = u.dimensions[:3].astype(np.float32)
    shifts = np.array([(i, j, k) for i in range(replicas) for j in range(replicas) for k in range(replicas)],
                      dtype=np.float32) * box
    frames = (base[:, None, :, :] + shifts[None, :, None, :]).reshape(len(base), -1, 3)
    return frames, box * replicas


def frame(frames: np.ndarray, box: np.ndarray, i: int) -> np.ndarray:
    """Frame i: an XTC frame drifting along x (wrapped), so slab ownership changes."""
    out = frames[i % len(frames)].copy()
    out[:, 0] = (out[:, 0] + 0.7 * i) % box[0]
    return out


def worker(args) -> None:
    """One mpiexec run: write ``--frames`` frames with one strategy; rank 0 prints JSON."""
    from mpi4py import MPI

    from trajscale import ParallelWriter

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    with np.load(args.system) as saved:
        frames, box = saved["frames"], saved["box"]
    n_atoms = frames.shape[1]
    rng = np.random.default_rng(rank)
    local = []
    for i in range(args.frames):   # this rank's slab of every frame, in no particular order
        x = frame(frames, box, i)
        slab = np.minimum((x[:, 0] / box[0] * size).astype(np.int64), size - 1)
        ids = rng.permutation(np.flatnonzero(slab == rank))
        local.append((ids, x[ids]))
    del frames
    out = Path(args.path)
    dims = [*box.tolist(), 90.0, 90.0, 90.0]
    comm.Barrier()
    t0 = time.perf_counter()
    with ParallelWriter(out, n_atoms, comm=comm, strategy=args.strategy, n_frames=None) as w:
        for i, (ids, pos) in enumerate(local):
            w.write(step=i, time=float(i), box=dims, ids=ids, positions=pos)
    dt = comm.reduce(time.perf_counter() - t0, op=MPI.MAX, root=0)
    if rank == 0:
        print(json.dumps({"seconds": dt, "bytes": os.path.getsize(out)}))


#: Publishing modes: label -> ParallelWriter options.
VISIBILITY = {"publish=False": {"publish": False}, "publish=True (default)": {},
              "durable=True (fsync)": {"durable": True}}


def write_published(path: Path, n_atoms: int, n_frames: int, options: dict, comm=None) -> tuple[float, float]:
    """Wall seconds to write ``n_frames`` frames one ``write()`` at a time with ``options`` (slowest rank), and
    the CPU seconds of every rank together (less moved by other jobs on the machine than the wall time)."""
    from trajscale import ParallelWriter

    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    ids = np.arange(rank, n_atoms, size)
    rng = np.random.default_rng(rank)
    frames = [rng.uniform(0, 100, (len(ids), 3)).astype(np.float32) for _ in range(min(n_frames, 4))]
    w = ParallelWriter(path, n_atoms, comm=comm, strategy="gather", chunks=1, **options)
    if comm is not None:
        comm.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n_frames):
        w.write(step=i, time=float(i), ids=ids, positions=frames[i % len(frames)], box=[100, 100, 100, 90, 90, 90])
    w.close()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    if comm is not None:
        from mpi4py import MPI

        dt, cpu = comm.allreduce(dt, op=MPI.MAX), comm.allreduce(cpu, op=MPI.SUM)
    return dt, cpu


def publish_worker(args) -> None:
    """One mpiexec run of :func:`write_published`; rank 0 prints the seconds as JSON."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    dt, cpu = write_published(Path(args.path), args.visibility_atoms, args.visibility_frames,
                              VISIBILITY[args.strategy], comm)
    if comm.Get_rank() == 0:
        print(json.dumps({"seconds": dt, "cpu": cpu}))


def visibility(args, d: Path) -> dict:
    """label -> (wall, CPU) seconds of each run, for each publishing mode, serial and on 2 ranks (the modes
    in turn)."""
    times: dict[str, list[tuple[float, float]]] = {}
    exe = shutil.which("mpiexec.mpich") or shutil.which("mpiexec")
    modes = list(VISIBILITY)
    for r in range(args.visibility_repeat):
        # in turn, each repeat starting at the next mode: a load that comes and goes, and the writeback of
        # the run before, fall on every mode alike
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
            path = d / "published.h5md"
            times.setdefault(f"serial, {mode}", []).append(
                write_published(path, args.visibility_atoms, args.visibility_frames, VISIBILITY[mode]))
            path.unlink()
            cmd = [exe, "-n", "2", sys.executable, __file__, "--publish-worker", "--strategy", mode,
                   "--visibility-atoms", str(args.visibility_atoms), "--visibility-frames",
                   str(args.visibility_frames), "--path", str(path)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
            if proc.returncode:
                raise SystemExit(proc.stderr[-3000:])
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            times.setdefault(f"2 ranks, {mode}", []).append((got["seconds"], got["cpu"]))
            path.unlink()
    return {label: times[label] for label in sorted(times, key=lambda k: not k.startswith("serial"))}


def print_visibility(args, runs: dict) -> dict:
    """The median of each mode's runs, and its cost: the median over the repeats of its time over the
    time of the run of ``publish=False`` just before it (pairs keep a load that drifts out of the ratio),
    for the wall time and for the CPU time."""
    from statistics import median

    mb = args.visibility_frames * args.visibility_atoms * 12 / 1e6
    print(f"publishing: {args.visibility_atoms:,} atoms x {args.visibility_frames} frames, one write() each, "
          f"median of {args.visibility_repeat}")
    print(f"{'producer, mode':36s} {'s':>7s} {'MB/s':>8s} {'cost':>7s} {'cpu s':>7s} {'cpu cost':>8s}")
    rows = {}
    for label, got in runs.items():
        base = runs[label.split(", ")[0] + ", publish=False"]
        dt, cpu = median(t for t, _ in got), median(c for _, c in got)
        cost = median(t / b for (t, _), (b, _) in zip(got, base, strict=True)) - 1
        cpu_cost = median(c / b for (_, c), (_, b) in zip(got, base, strict=True)) - 1
        rows[label] = {"seconds": dt, "mb_per_s": mb / dt, "cost": cost, "cpu_seconds": cpu, "cpu_cost": cpu_cost,
                       "runs": got}
        print(f"{label:36s} {dt:7.3f} {mb / dt:8.1f} {100 * cost:+6.1f}% {cpu:7.3f} {100 * cpu_cost:+7.1f}%")
    return rows


def run_mpi(strategy: str, n: int, args, path: Path) -> dict:
    exe = shutil.which("mpiexec.mpich") or shutil.which("mpiexec")
    cmd = [exe, "-n", str(n), sys.executable, __file__, "--worker", "--strategy", strategy,
           "--frames", str(args.frames), "--system", str(path.parent / "system.npz"), "--path", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def serial_baselines(args, d: Path) -> dict:
    import MDAnalysis as mda
    from MDAnalysis.coordinates.H5MD import H5MDWriter as MDAH5MDWriter

    frames, box = system(args.replicas)
    # the ranks' frames, saved once: a rank of every run reads them instead of importing MDAnalysis and its
    # test files and parsing the GRO itself (not timed either way)
    np.savez(d / "system.npz", frames=frames, box=box)
    n_atoms = frames.shape[1]
    data = [frame(frames, box, i) for i in range(args.frames)]
    del frames
    out = {}
    path = d / "frames.xyz"
    t0 = time.perf_counter()
    with open(path, "w") as f:
        for i, x in enumerate(data):
            f.write(f"{n_atoms}\nframe {i}\n")
            np.savetxt(f, x, fmt="%.4f")
    out["ASCII XYZ (savetxt)"] = {"seconds": time.perf_counter() - t0, "bytes": path.stat().st_size}
    path.unlink()
    path = d / "frames.bin"
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for x in data:
            x.tofile(f)
    out["raw float32 binary (tofile)"] = {"seconds": time.perf_counter() - t0, "bytes": path.stat().st_size}
    path.unlink()
    u = mda.Universe.empty(n_atoms, trajectory=True)
    u.dimensions = [*box.tolist(), 90, 90, 90]
    path = d / "mda.h5md"
    t0 = time.perf_counter()
    with MDAH5MDWriter(str(path), n_atoms, n_frames=args.frames, convert_units=False) as w:
        for x in data:
            u.atoms.positions = x
            w.write(u.atoms)
    out["MDAnalysis H5MDWriter"] = {"seconds": time.perf_counter() - t0, "bytes": path.stat().st_size}
    path.unlink()
    return out, n_atoms


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=3, help="copies per axis (3 -> 27 copies, 1.29 M atoms)")
    p.add_argument("--frames", type=int, default=3, help="frames written per run (default 3)")
    p.add_argument("--ranks", default="1,2,3", help="MPI rank counts (default 1,2,3)")
    p.add_argument("--out-dir", default=None, help="where the files are written (default: a temp dir)")
    p.add_argument("--json", default=None, help="also write the results as JSON here")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    p.add_argument("--visibility-atoms", type=int, default=111815, help="atoms per frame when timing publishing "
                   "(default 111,815: YiiP)")
    p.add_argument("--visibility-frames", type=int, default=100, help="frames per publishing run (default 100)")
    p.add_argument("--visibility-repeat", type=int, default=3, help="runs of each publishing mode (default 3)")
    p.add_argument("--visibility-only", action="store_true", help="time publishing only")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--publish-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--strategy", default="collective", help=argparse.SUPPRESS)
    p.add_argument("--path", default=None, help=argparse.SUPPRESS)
    p.add_argument("--system", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.json:   # refused before the measurements, not after them
        check_script_output(PROG, args.json, args.overwrite)
    if args.worker:
        worker(args)
        return 0
    if args.publish_worker:
        publish_worker(args)
        return 0
    d = Path(tempfile.mkdtemp(prefix="trajscale-write-", dir=args.out_dir))
    try:
        published = visibility(args, d)
        if args.visibility_only:
            rows = print_visibility(args, published)
            if args.json:
                write_script_json(PROG, args.json, {"publishing": rows}, args.overwrite)
            return 0
        base, n_atoms = serial_baselines(args, d)
        frame_mb = n_atoms * 12 / 1e6
        rows = {name: dict(r, ranks=1) for name, r in base.items()}
        for n in [int(x) for x in args.ranks.split(",")]:
            for s in STRATEGIES:
                path = d / f"{s}-{n}.h5md"
                rows[f"trajscale {s}, {n} rank(s)"] = dict(run_mpi(s, n, args, path), ranks=n)
                path.unlink()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"{n_atoms:,} atoms x {args.frames} frames ({frame_mb:.1f} MB of float32 positions per frame)")
    print(f"{'writer':40s} {'s':>7s} {'MB/s':>8s} {'file MB':>9s}")
    for name, r in rows.items():
        r["mb_per_s"] = args.frames * frame_mb / r["seconds"]
        print(f"{name:40s} {r['seconds']:7.2f} {r['mb_per_s']:8.1f} {r['bytes'] / 1e6:9.1f}")
    best2 = max((rows.get(f"trajscale {s}, 2 rank(s)", {}).get("mb_per_s", 0), s) for s in STRATEGIES)
    g2 = rows.get("trajscale gather, 2 rank(s)", {}).get("mb_per_s")
    if g2:
        print(f"best at 2 ranks ({best2[1]}) / gather at 2 ranks: {best2[0] / g2:.2f}x (target >= 1.5x)")
    h5 = max(r["mb_per_s"] for name, r in rows.items() if name.startswith("trajscale"))
    print(f"best trajscale H5MD / ASCII: {h5 / rows['ASCII XYZ (savetxt)']['mb_per_s']:.2f}x (target >= 2.5x)")
    publishing = print_visibility(args, published)
    if args.json:
        write_script_json(PROG, args.json, {"n_atoms": n_atoms, "frames": args.frames, "rows": rows,
                                            "publishing": publishing}, args.overwrite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
