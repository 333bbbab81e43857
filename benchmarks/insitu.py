"""Following a running simulation: a ParallelWriter producer under ``mpiexec -n 2`` writes frames at a
set rate; a follower analyses them as they land. Reports the frames/s the follower sustained and the lag
from a frame written to the frame analysed (median, p99), for trajscale's follower on serial and
processes(2), and for MDAnalysis's way: polling, reopening the file with MDAnalysis's own H5MD reader and
analysing the new frames.

    python benchmarks/insitu.py [--atoms 111815] [--frames 200] [--rate 10] [--period 3] [--period-frames 10]
                                [--quick]

YiiP (seed 000) is ~112,000 atoms: 113 GiB over 90,100 frames of float32 xyz; 111,815 here. The analysis
is the RMSD of one atom in 500 (named CA in a generated GRO topology) after superposition on frame 0.
A second producer writes a frame every ``--period`` seconds (``--period-frames`` of them), as a simulation
saving a frame every few seconds does: each frame must reach the follower while the producer waits for
the next one (``ParallelWriter`` publishes a frame when ``write()`` returns), so its lag is the
follower's own, not the write period.
``--quick``: 2,000 atoms, 10 frames, and 3 frames every 1 s (the test suite's size).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()


def produce(out: str, n_atoms: int, n_frames: int, rate: float, times_file: str, publish: bool = True) -> None:
    """Under mpiexec: each rank holds half the atoms (domain decomposition) and writes every frame."""
    from mpi4py import MPI

    from trajscale.pwrite import ParallelWriter

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    ids = np.arange(rank, n_atoms, size)
    rng = np.random.default_rng(rank)
    base = rng.uniform(0, 100, (len(ids), 3)).astype(np.float32)
    written = []
    t0 = time.time()
    with ParallelWriter(out, n_atoms, comm=comm, strategy="gather", chunks=1, publish=publish) as w:
        for i in range(n_frames):
            due = t0 + i / rate
            time.sleep(max(0.0, due - time.time()))
            pos = base + rng.normal(0, 0.5, base.shape).astype(np.float32)
            w.write(step=i, time=float(i), ids=ids, positions=pos, box=np.array([100, 100, 100, 90, 90, 90]))
            written.append(time.time())
    if rank == 0:
        Path(times_file).write_text(json.dumps(written))


def topology(path: Path, n_atoms: int) -> None:
    import MDAnalysis as mda

    u = mda.Universe.empty(n_atoms, trajectory=True)
    u.add_TopologyAttr("names", np.where(np.arange(n_atoms) % 500 == 0, "CA", "X"))
    u.add_TopologyAttr("resnames", ["RES"])
    u.atoms.positions = np.zeros((n_atoms, 3))
    u.atoms.write(str(path))


def start_producer(work: Path, n_atoms: int, n_frames: int, rate: float, tag: str, publish: bool = True):
    out, times = work / f"{tag}.h5md", work / f"{tag}.written.json"
    mpiexec = shutil.which("mpiexec.mpich") or shutil.which("mpiexec")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([mpiexec, "-n", "2", sys.executable, str(HERE), "--produce", str(out), str(n_atoms),
                             str(n_frames), str(rate), str(times), "publish" if publish else "no"], env=env)
    return proc, out, times


def follow_trajscale(top: Path, out: Path, executor: str) -> dict[int, float]:
    """Frame -> wall time its task ended."""
    import trajscale as ts
    from trajscale.follow import FollowOptions

    r = ts.run(ts.RMSD(select="name CA"), str(top), str(out), executor=executor, n_workers=2,
               follow=FollowOptions(idle=30, poll=0.05, wait=120))
    return {f: t.t_end for t in r.report.tasks for f in range(t.start, t.stop)}


def follow_mdanalysis(top: Path, out: Path) -> dict[int, float]:
    """MDAnalysis's way: poll, reopen the file with its H5MD reader, analyse the new complete frames."""
    import h5py
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms

    from trajscale.h5md.writer import COMPLETE_ATTR

    done, ref, quiet, seen = 0, None, time.monotonic(), {}
    while time.monotonic() - quiet < 30:
        u = None
        try:
            with h5py.File(out, "r", locking=False) as f:   # frames whose step is written are whole
                n = f["particles/all/position/step"].shape[0]
                finished = bool(f.attrs.get(COMPLETE_ATTR, False))
            u = mda.Universe(str(top), str(out))
            ca = u.select_atoms("name CA")
            # iterating reopens the file, which the writer may be extending: a failed open is
            # retried at the next poll, as a polling user would
            for ts in u.trajectory[done:n]:
                if ref is None:
                    ref = ca.positions.copy()
                rms.rmsd(ca.positions, ref, center=True, superposition=True)
                seen.setdefault(ts.frame, time.time())   # the first time a frame was analysed
        except Exception:   # noqa: BLE001 - MDAnalysis's reader meeting the writer mid-flush: tried again
            time.sleep(0.05)
            continue
        finally:   # a file left open in this process would show every later open its old state (HDF5)
            if u is not None:
                with contextlib.suppress(AttributeError, OSError):   # a reader whose open failed half-way
                    u.trajectory.close()
        if n > done:
            done, quiet = n, time.monotonic()
        elif finished:
            break
        time.sleep(0.05)
    return seen


def measure(work: Path, top: Path, n_atoms: int, n_frames: int, rate: float, side: str) -> tuple:
    tag = "".join(c for c in side if c.isalnum())
    proc, out, times = start_producer(work, n_atoms, n_frames, rate, tag, publish="publish=False" not in side)
    try:
        analysed = follow_mdanalysis(top, out) if side == "MDAnalysis polling" else follow_trajscale(
            top, out, "processes" if side.startswith("processes") else "serial")
    finally:
        proc.wait(timeout=600)
    written = json.loads(times.read_text())
    frames = sorted(f for f in analysed if f < len(written))
    lag = np.array([analysed[f] - written[f] for f in frames])
    span = max(analysed[f] for f in frames) - written[0]
    wrote = (len(written) - 1) / (written[-1] - written[0])
    return len(frames), wrote, len(frames) / span, float(np.median(lag)), float(np.percentile(lag, 99))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--produce":
        out, n_atoms, n_frames, rate, times, publish = sys.argv[2:8]
        produce(out, int(n_atoms), int(n_frames), float(rate), times, publish == "publish")
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--atoms", type=int, default=111815)
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--rate", type=float, default=10.0, help="frames/s the producer writes")
    p.add_argument("--period", type=float, default=3.0, help="seconds between the slow producer's frames")
    p.add_argument("--period-frames", type=int, default=10, help="frames the slow producer writes (0: none)")
    p.add_argument("--quick", action="store_true", help="2,000 atoms, 10 frames; 3 frames every 1 s")
    p.add_argument("--sides", default="serial,processes(2),MDAnalysis polling")
    args = p.parse_args()
    if args.quick:
        args.atoms, args.frames, args.period, args.period_frames = 2000, 10, 1.0, 3
    os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")
    with tempfile.TemporaryDirectory(prefix="insitu-") as d:
        work = Path(d)
        top = work / "top.gro"
        topology(top, args.atoms)
        print(f"producer: mpiexec -n 2 ParallelWriter, {args.atoms} atoms, {args.frames} frames at "
              f"{args.rate:g} frames/s ({args.atoms * 12 * args.rate / 1e6:.1f} MB/s)")
        print(f"{'follower':44s} {'frames':>6s} {'written/s':>9s} {'frames/s':>9s} {'lag median s':>13s} "
              f"{'lag p99 s':>10s}")
        runs = [(side, args.frames, args.rate) for side in args.sides.split(",")]
        if args.period_frames:
            runs.append((f"serial, a frame every {args.period:g} s", args.period_frames, 1 / args.period))
        if args.period_frames and not args.quick:   # the same producer as before publishing, for comparison
            runs.append((f"{runs[-1][0]}, publish=False", args.period_frames, 1 / args.period))
        for side, frames, rate in runs:
            n, wrote, fps, med, p99 = measure(work, top, args.atoms, frames, rate, side)
            print(f"{side:44s} {n:6d} {wrote:9.2f} {fps:9.2f} {med:13.3f} {p99:10.3f}")


if __name__ == "__main__":
    main()
