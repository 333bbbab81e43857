"""Trajectories as lazy arrays on YiiP-sized frames: the CA atoms' mean structure four ways, the bytes a
selection reads, and peak memory over a file five times a memory limit.

    python benchmarks/arrays.py [--atoms 111815] [--frames 300] [--parts 6] [--repeat 3] [--workdir DIR]
    python benchmarks/arrays.py --quick          # 2,000 atoms, 20 frames: the test suite's size
    python benchmarks/arrays.py --side SIDE TOPOLOGY TRAJ...   # one side, a whole process to time from outside

YiiP (seed 000) is ~112,000 atoms; 111,815 here, 1.34 MB a frame of float32 xyz. A generated
topology: the first tenth of the atoms is a protein (ALA residues N, CA, C, O: a contiguous
"protein" span, its CA atoms one in four), the rest water. Frames are a random walk about random
positions, written once as H5MD (``trajscale convert``'s default chunks: 1 frame of this size)
and as ``--parts`` XTC files (MDAnalysis's writer), reused from ``--workdir`` when present.

Each side below is a new Python process, timed from outside (start-up, imports, topology and
reads included), the sides in turn ``--repeat`` times, medians shown; page cache warm.

* ``lazy mean``: ``ds = trajscale.open_dataset(top, traj)``,
  ``ds.positions.isel(atom=ca).mean("frame").compute()`` (ca from ``ds.trajscale.atoms``);
* ``dask mean``: ``trajscale.open_dataset(top, traj, select="name CA", chunks={})``, the mean
  computed by Dask's synchronous scheduler (one chunk per stored chunk or XTC part);
* ``trajscale run average``: the CLI, serial (it superposes each frame on the first, as
  MDAnalysis's ``align.AverageStructure``: more arithmetic than a plain mean);
* MDAnalysis: ``AnalysisFromFunction(lambda ag: ag.positions.copy(), ca)`` then NumPy's mean,
  and ``u.trajectory.timeseries(ca).mean(0)``.

The lazy and Dask means are checked against MDAnalysis's (1e-3 Å). Read amplification: bytes
trajscale's read counter counts for a selection, over the selection's own bytes (frames x atoms x
12), for a contiguous selection ("protein") and a scattered one ("name CA"). Peak memory: the
mean of every atom over a file five times a limit, in chunks of frames (Dask, synchronous), as
the largest RSS of the process (:func:`tests.support.peak_rss.peak_rss`), over the first chunk and
over the whole file (the whole file alone at ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))   # tests.support (peak_rss), beside the benchmarks
MB = 1024**2
PROTEIN_SHARE = 10   # one atom in ten is protein


def side(name: str, top: str, trajs: list[str], out: str) -> None:
    """Run one side in this process and save the mean structure (``out``, .npy)."""
    traj = trajs[0] if len(trajs) == 1 else trajs
    if name == "lazy":
        import trajscale as ts

        ds = ts.open_dataset(top, traj)
        ca = ds.trajscale.atoms("name CA")
        mean = ds.positions.isel(atom=ca).mean("frame").compute().values
    elif name == "dask":
        import trajscale as ts

        ds = ts.open_dataset(top, traj, select="name CA", chunks={})
        mean = ds.positions.mean("frame").compute(scheduler="synchronous").values
    elif name in ("mda_aff", "mda_timeseries"):
        import MDAnalysis as mda

        u = mda.Universe(top, traj)
        ca = u.select_atoms("name CA")
        if name == "mda_aff":
            from MDAnalysis.analysis.base import AnalysisFromFunction

            mean = AnalysisFromFunction(lambda ag: ag.positions.copy(), ca).run().results.timeseries.mean(0)
        else:
            mean = u.trajectory.timeseries(ca, order="fac").mean(0)
    elif name == "warm":   # TRAJ... is every input, "+" between them: each one's figures in this one process
        groups, cur = [], []
        for t in [*trajs, "+"]:
            if t == "+":
                groups.append(cur[0] if len(cur) == 1 else cur)
                cur = []
            else:
                cur.append(t)
        print(json.dumps([warm_seconds(top, g, int(out)) for g in groups]))
        return
    elif name == "memory":
        import trajscale as ts

        frames, stop = (int(v) for v in out.split(":")[1:])
        ds = ts.open_dataset(top, traj, chunks={"frame": frames}).isel(frame=slice(0, stop))
        ds.positions.mean("frame").compute(scheduler="synchronous")
        return
    else:
        raise SystemExit(f"unknown side {name!r}")
    np.save(out, np.asarray(mean, np.float32))


def warm_seconds(top: str, traj, repeat: int) -> dict[str, float]:
    """Median seconds of each route's computation inside one process, after a first call (imports,
    topology and caches warm): the lazy mean, the Dask mean and ``trajscale.run`` of the average, serial."""
    import trajscale as ts

    def lazy():
        ds = ts.open_dataset(top, traj)
        ds.positions.isel(atom=ds.trajscale.atoms("name CA")).mean("frame").compute()

    def dask():
        ts.open_dataset(top, traj, select="name CA", chunks={}).positions.mean("frame").compute(
            scheduler="synchronous")

    def run():
        ts.run(ts.AverageStructure(select="name CA"), top, traj, executor="serial")

    out = {}
    for name, fn in (("lazy", lazy), ("dask", dask), ("run", run)):
        fn()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    return out


def build(work: Path, n_atoms: int, n_frames: int, n_parts: int) -> tuple[str, str, list[str]]:
    """(topology, H5MD, XTC parts) of the generated system, built unless present."""
    import MDAnalysis as mda

    work.mkdir(parents=True, exist_ok=True)
    tag = f"{n_atoms}-{n_frames}"
    top, h5 = work / f"system-{n_atoms}.gro", work / f"traj-{tag}.h5md"
    parts = [work / f"traj-{tag}.part{k:03d}.xtc" for k in range(n_parts)]
    if not top.exists():
        u = topology_universe(n_atoms)
        u.atoms.write(str(top))
    if h5.exists() and all(p.exists() for p in parts):
        return str(top), str(h5), [str(p) for p in parts]
    u = mda.Universe(str(top))
    rng = np.random.default_rng(0)
    pos = u.atoms.positions.astype(np.float32)
    write_h5md(h5, u, n_frames, rng, pos.copy())
    bounds = np.linspace(0, n_frames, n_parts + 1).astype(int)
    rng = np.random.default_rng(0)   # the same walk: the XTC parts hold the H5MD's frames
    for k, path in enumerate(parts):
        with mda.Writer(str(path), n_atoms) as w:
            for i in range(bounds[k], bounds[k + 1]):
                pos += rng.normal(0, 0.05, pos.shape).astype(np.float32)
                u.atoms.positions = pos
                u.trajectory.ts.time = float(i)
                u.trajectory.ts.data["step"] = i
                w.write(u.atoms)
    return str(top), str(h5), [str(p) for p in parts]


def topology_universe(n_atoms: int):
    """ALA residues (N, CA, C, O) for the first tenth of the atoms, water (OW, HW1, HW2) after."""
    import MDAnalysis as mda

    n_prot = n_atoms // PROTEIN_SHARE // 4 * 4
    n_water = -(-(n_atoms - n_prot) // 3)
    resindex = np.r_[np.arange(n_prot) // 4, n_prot // 4 + np.arange(n_atoms - n_prot) // 3]
    u = mda.Universe.empty(n_atoms, n_residues=n_prot // 4 + n_water, atom_resindex=resindex, trajectory=True)
    u.add_TopologyAttr("names", np.r_[np.tile(["N", "CA", "C", "O"], n_prot // 4),
                                      np.resize(["OW", "HW1", "HW2"], n_atoms - n_prot)])
    u.add_TopologyAttr("resnames", ["ALA"] * (n_prot // 4) + ["SOL"] * n_water)
    u.add_TopologyAttr("resids", np.arange(1, n_prot // 4 + n_water + 1))
    side_len = (n_atoms / 0.1) ** (1 / 3)   # about water's density
    u.atoms.positions = np.random.default_rng(1).uniform(0, side_len, (n_atoms, 3)).astype(np.float32)
    u.dimensions = [side_len, side_len, side_len, 90, 90, 90]
    return u


def write_h5md(path: Path, u, n_frames: int, rng, pos: np.ndarray) -> None:
    from trajscale.h5md.writer import H5MDWriter
    from trajscale.util import atomic_output

    box = np.tile(np.asarray(u.dimensions, np.float32), (1, 1))
    with atomic_output(path) as tmp, H5MDWriter(tmp, len(pos), n_frames=n_frames, names=u.atoms.names,
                                                resnames=u.atoms.resnames, resids=u.atoms.resids) as w:
        for i in range(n_frames):
            pos += rng.normal(0, 0.05, pos.shape).astype(np.float32)
            w.write(position=pos[None], step=np.array([i]), time=np.array([float(i)]), box=box)


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def side_commands(work: Path, top: str, trajs: list[str], tag: str) -> dict[str, list[str]]:
    py = [sys.executable, str(HERE), "--side"]
    avg = str(work / f"average-{tag}.npy")
    return {
        "lazy mean (isel, compute)": [*py, "lazy", top, *trajs, "--side-out", str(work / f"lazy-{tag}.npy")],
        "dask mean (select=, chunks={})": [*py, "dask", top, *trajs, "--side-out", str(work / f"dask-{tag}.npy")],
        "trajscale run average": [sys.executable, "-m", "trajscale.cli.main", "run", "average", top, *trajs,
                                  "--select", "name CA", "--executor", "serial", "--out", avg, "--overwrite", "-q"],
        "MDAnalysis AnalysisFromFunction": [*py, "mda_aff", top, *trajs, "--side-out", str(work / f"aff-{tag}.npy")],
        "MDAnalysis timeseries()": [*py, "mda_timeseries", top, *trajs, "--side-out", str(work / f"ts-{tag}.npy")],
    }


def time_sides(work: Path, top: str, inputs: dict[str, list[str]], repeat: int, warmup: bool = True) -> dict:
    """Median whole-process seconds per (side, input); the sides run in turn within each repeat."""
    cmds = {(s, i): c for i, trajs in inputs.items() for s, c in side_commands(work, top, trajs, i).items()}
    for cmd in cmds.values() if warmup else ():   # page cache, topology and offset caches
        timed(cmd)
    times: dict = {k: [] for k in cmds}
    for _ in range(repeat):
        for k, cmd in cmds.items():
            times[k].append(timed(cmd))
    for i in inputs:
        ref = np.load(work / f"aff-{i}.npy")
        for s in ("lazy", "dask", "ts"):
            diff = float(np.abs(np.load(work / f"{s}-{i}.npy") - ref).max())
            if not diff <= 1e-3:
                raise SystemExit(f"{s} mean on {i} differs from MDAnalysis's by {diff:.2e} A")
    return {k: statistics.median(v) for k, v in times.items()}


def amplification(top: str, h5: str) -> list[tuple[str, str, int, float]]:
    """(selection, route, atoms, bytes read / selection bytes) on the frame-chunked H5MD file."""
    import trajscale as ts

    rows = []
    for sel in ("protein", "name CA"):
        ds = ts.open_dataset(top, h5)
        idx = ds.trajscale.atoms(sel)
        before = ds.trajscale.bytes_read
        ds.positions.isel(atom=idx).values   # noqa: B018 - the read being counted
        lazy = ds.trajscale.bytes_read - before
        chunked = ts.open_dataset(top, h5, select=sel, chunks={})
        before = chunked.trajscale.bytes_read
        chunked.positions.sum().compute(scheduler="synchronous")
        dask = chunked.trajscale.bytes_read - before
        own = ds.sizes["frame"] * len(idx) * 12
        rows += [(sel, "lazy isel", len(idx), lazy / own), (sel, "select=, chunks={}", len(idx), dask / own)]
    return rows


def memory(work: Path, top: str, limit_mb: float, first: bool = True) -> tuple[float, int, float | None, float]:
    """(file MB, chunk frames, peak RSS MB over the first chunk (None unless ``first``), over the whole file)
    of the all-atom mean over a file of five times ``limit_mb``, in chunks of frames."""
    import MDAnalysis as mda

    from tests.support.peak_rss import peak_rss

    u = mda.Universe(top)
    frame = u.atoms.n_atoms * 12
    n_frames = int(np.ceil(5 * limit_mb * MB / frame))
    path = work / f"memory-{u.atoms.n_atoms}-{n_frames}.h5md"
    if not path.exists():
        write_h5md(path, u, n_frames, np.random.default_rng(2), u.atoms.positions.astype(np.float32))
    chunk = max(1, int(limit_mb * MB // 16 // frame))   # chunks in flight: a small share of the limit
    peaks = [] if first else [None]
    for stop in (chunk, n_frames) if first else (n_frames,):
        peak, done = peak_rss([sys.executable, str(HERE), "--side", "memory", top, str(path), "--side-out",
                               f"chunk:{chunk}:{stop}"])
        if done.returncode:
            raise SystemExit(done.stderr[-3000:])
        peaks.append(peak / MB)
    return path.stat().st_size / MB, chunk, peaks[0], peaks[1]


def report(args, top: str, h5: str, parts: list[str]) -> None:
    inputs = {"h5md": [h5], "xtc": parts}
    secs = time_sides(Path(args.workdir), top, inputs, args.repeat, warmup=not args.quick)
    print(f"{args.atoms} atoms x {args.frames} frames; H5MD {Path(h5).stat().st_size / MB:.0f} MB, "
          f"{len(parts)} XTC parts; whole processes, median of {args.repeat}")
    print(f"{'side':<34}{'H5MD s':>9}{'XTC chain s':>13}{'MDA AFF / side':>16}")
    for s in side_commands(Path(args.workdir), top, parts, "x"):
        h, x = secs[(s, "h5md")], secs[(s, "xtc")]
        aff_h, aff_x = secs[("MDAnalysis AnalysisFromFunction", "h5md")], secs[("MDAnalysis AnalysisFromFunction",
                                                                                "xtc")]
        print(f"{s:<34}{h:>9.2f}{x:>13.2f}{aff_h / h:>9.1f}x{aff_x / x:>6.1f}x")
    lazy, avg = "lazy mean (isel, compute)", "trajscale run average"
    print(f"lazy mean / trajscale run average, whole processes: H5MD {secs[(lazy, 'h5md')] / secs[(avg, 'h5md')]:.2f}"
          f", XTC chain {secs[(lazy, 'xtc')] / secs[(avg, 'xtc')]:.2f}")
    print(f"\n{'in one process, warm (serial)':<34}{'H5MD s':>9}{'XTC chain s':>13}{'/ ts.run':>10}")
    # every input in one process: each route's figures come after a first call of its own on that input anyway
    trajs = [t for i, paths in enumerate(inputs.values()) for t in (["+"] if i else []) + paths]
    got = json.loads(subprocess.run([sys.executable, str(HERE), "--side", "warm", top, *trajs, "--side-out",
                                     str(args.repeat)], capture_output=True, text=True, check=True,
                                    timeout=3600).stdout.strip().splitlines()[-1])
    warm = dict(zip(inputs, got, strict=True))
    for key, label in (("lazy", "lazy mean"), ("dask", "dask mean"), ("run", "ts.run(AverageStructure)")):
        h, x = warm["h5md"][key], warm["xtc"][key]
        print(f"{label:<34}{h:>9.3f}{x:>13.3f}{h / warm['h5md']['run']:>6.2f} {x / warm['xtc']['run']:>4.2f}")
    print(f"\n{'selection':<12}{'route':<22}{'atoms':>8}{'read amplification':>20}")
    for sel, route, n, amp in amplification(top, h5):
        print(f"{sel:<12}{route:<22}{n:>8}{amp:>20.2f}")
    # --quick: the whole file alone (no figure means anything at that size; the run and its line are checked)
    size, chunk, first, whole = memory(Path(args.workdir), top, args.memory_limit_mb, first=not args.quick)
    print(f"\npeak memory, all-atom mean in chunks of {chunk} frames (Dask, synchronous): over the first chunk "
          f"{f'{first:.0f} MB' if first is not None else 'n/a'}; over the whole {size:.0f} MB file (5 x the "
          f"{args.memory_limit_mb:.0f} MB limit) "
          f"{whole:.0f} MB ({'within' if whole <= args.memory_limit_mb else 'OVER'} the limit)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--atoms", type=int, default=111_815)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--parts", type=int, default=6)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", default="arrays-bench")
    p.add_argument("--memory-limit-mb", type=float, default=400.0,
                   help="the memory test's limit; its file is five times this (default %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="2,000 atoms, 20 frames, 2 parts, 1 repeat and no warm-up, a 1 MB memory limit (a 5 MB "
                        "file: a process's peak is far above it at any size this small, so the line is there, not "
                        "its figure; the whole file's peak alone, not the first chunk's)")
    p.add_argument("--side", nargs="+", metavar=("SIDE", "FILE"), help="run one side: SIDE TOPOLOGY TRAJ...")
    p.add_argument("--side-out", default=None, help="with --side: where the mean structure goes (.npy)")
    args = p.parse_args(argv)
    if args.side:
        if len(args.side) < 3 or not args.side_out:
            p.error("--side SIDE TOPOLOGY TRAJ... --side-out FILE")
        side(args.side[0], args.side[1], args.side[2:], args.side_out)
        return 0
    if args.quick:
        args.atoms, args.frames, args.parts, args.repeat, args.memory_limit_mb = 2000, 20, 2, 1, 1.0
    top, h5, parts = build(Path(args.workdir), args.atoms, args.frames, args.parts)
    report(args, top, h5, parts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
