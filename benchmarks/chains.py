"""A trajectory in many XTC parts, read in place: MDAnalysis, trajscale serial and processes(2), MDTraj.

    python benchmarks/chains.py [--frames 1000] [--parts 200] [--repeat 1] [--cache DIR] [--whole 5] [--warmup 1]

Issue 14's case: AdK in water (47,681 atoms) over ``--frames`` frames written
as ``--parts`` XTC files (the 10 frames of MDAnalysisTests' XTC repeated, time
and step increasing), built once into ``~/.cache/trajscale/chains-F-P``. Each
row is one whole call in a new interpreter (imports before the clock, as a
script's first lines), computing the RMSD of the CA atoms after superposition
on frame 0:

* MDAnalysis: ``rms.RMSD(mda.Universe(GRO, parts), select="name CA").run()``
  (its ChainReader); MDAnalysis's offset caches (``.*.xtc_offsets.npz``) are
  deleted before the call, so it builds them as on first contact.
* trajscale: ``ts.run(ts.RMSD(select="name CA"), GRO, parts, executor=...)``,
  serial and processes(2) (pool start included; an empty topology cache).
* MDTraj: ``md.load(parts, top=GRO, atom_indices=CA)`` + ``md.rmsd`` (the
  CA indices from ``md.load_topology``), if mdtraj is importable.
* warm rows: the second ``ts.run`` on one executor (pool started, compiled
  kernels loaded, topology cached): what the reads themselves scale to.
* whole processes (``--whole N`` pairs, after ``--warmup`` uncounted pairs, one by default; none in
  the test suite's smoke run, whose one pair's figures mean nothing): the ``trajscale
  run rmsd GRO PART...`` command against the MDAnalysis script a user writes
  (``trajscale.whole_runs``), each a new process timed from outside, start-up
  included, paired; serial, and processes(2) against MDAnalysis's
  multiprocessing(2). MDAnalysis's offset caches are kept from the warm-up on.

Page cache warm on every side (the parts are read once before the first row).
CPU is the call's CPU seconds, worker processes included: on a machine whose
second core is busy (the "parallel ceiling" line measures it), equal CPU for
serial and processes(2) shows that the workers duplicate no work.
Every side's RMSD is checked against MDAnalysis's (1e-3 Å).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, resource, sys, time, warnings
warnings.filterwarnings("ignore")
side, gro, listing = sys.argv[1], sys.argv[2], sys.argv[3]
parts = open(listing).read().split()
def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime
if side == "mdtraj":
    import mdtraj as md
    c0 = cpu(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    ca = md.load_topology(gro).select("name CA")
    t = md.load(parts, top=gro, atom_indices=ca)
    out = md.rmsd(t, t, 0) * 10.0   # nm -> Angstrom
else:
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms
    import trajscale as ts
    c0 = cpu(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if side == "mdanalysis":
        out = rms.RMSD(mda.Universe(gro, parts), select="name CA").run().results.rmsd[:, 2]
    elif side.endswith("_warm"):   # the second call on the same executor: pool and kernels loaded
        from trajscale.executors import make_executor
        ex = make_executor("processes" if side.startswith("processes") else "serial", 2)
        ts.run(ts.RMSD(select="name CA"), gro, parts, executor=ex)
        t0 = time.perf_counter()
        out = ts.run(ts.RMSD(select="name CA"), gro, parts, executor=ex).rmsd
        ex.close()
    else:
        ex, n = {"serial": ("serial", 1), "processes2": ("processes", 2)}[side]
        r = ts.run(ts.RMSD(select="name CA"), gro, parts, executor=ex, n_workers=n)
        out = r.rmsd
t = time.perf_counter() - t0
# CPU seconds of the call: this process's and its (joined) worker processes'; warm rows also count the first call
c = cpu(resource.RUSAGE_SELF) - c0 + cpu(resource.RUSAGE_CHILDREN)
print(json.dumps({"t": t, "cpu": c, "rmsd": [float(x) for x in out]}))
"""

SIDES = ("mdanalysis", "serial", "processes2", "mdtraj", "serial_warm", "processes2_warm")
LABELS = {"mdanalysis": "MDAnalysis ChainReader, serial", "serial": "trajscale serial",
          "processes2": "trajscale processes(2)", "mdtraj": "MDTraj load(atom_indices) + rmsd",
          "serial_warm": "trajscale serial, warm (2nd call)",
          "processes2_warm": "trajscale processes(2), warm (2nd call)"}


def build_chain(cache: Path, n_frames: int, n_parts: int) -> list[str]:
    """``n_parts`` XTC files holding ``n_frames`` frames of AdK in water; built once (marker written last)."""
    import numpy as np
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile
    from MDAnalysisTests.datafiles import XTC

    marker = cache / "complete.json"
    names = [str(cache / f"part_{k:04d}.xtc") for k in range(n_parts)]
    if marker.is_file() and json.loads(marker.read_text()).get("parts") == names:
        return names
    cache.mkdir(parents=True, exist_ok=True)
    with XTCFile(XTC) as f:   # native units (nm), as the file holds them
        frames = [(fr.x.copy(), fr.box.copy(), fr.time) for fr in f]
    dt = frames[1][2] - frames[0][2]
    bounds = np.linspace(0, n_frames, n_parts + 1).round().astype(int)
    for k, name in enumerate(names):
        tmp = name + ".tmp.xtc"
        with XTCFile(tmp, "w") as w:
            for i in range(bounds[k], bounds[k + 1]):
                x, box, _ = frames[i % len(frames)]
                w.write(x, box, i, i * dt, 1000.0)
        os.replace(tmp, name)
    marker.write_text(json.dumps({"parts": names, "frames": n_frames}))
    return names


def _burn(n: int = 4_000_000) -> float:
    t0 = time.perf_counter()
    s = 0
    for i in range(n):
        s += i
    return time.perf_counter() - t0


def parallel_ceiling() -> float:
    """Speed-up two processes of pure arithmetic get over one, now: what a shared machine allows."""
    import multiprocessing as mp

    t0 = time.perf_counter()
    _burn(), _burn()
    one = time.perf_counter() - t0
    with mp.get_context("fork").Pool(2) as pool:
        pool.map(_burn, [10] * 2)   # started
        t0 = time.perf_counter()
        pool.map(_burn, [4_000_000] * 2)
        two = time.perf_counter() - t0
    return one / two


def measure(side: str, gro: str, listing: str) -> dict | None:
    if side == "mdtraj":
        try:
            import mdtraj  # noqa: F401
        except ImportError:
            return None
    if side == "mdanalysis":
        for p in glob.glob(os.path.join(os.path.dirname(listing), ".*_offsets.*")):
            os.remove(p)
    with tempfile.TemporaryDirectory() as topcache:
        env = dict(os.environ, TRAJSCALE_CACHE_DIR=topcache)
        out = subprocess.run([sys.executable, "-c", CHILD, side, gro, listing],
                             capture_output=True, text=True, env=env, check=False)
    if side == "mdanalysis":   # leave the folder as trajscale and MDTraj find it: without offset caches
        for p in glob.glob(os.path.join(os.path.dirname(listing), ".*_offsets.*")):
            os.remove(p)
    if out.returncode:
        raise SystemExit(f"{side} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    import numpy as np
    from MDAnalysisTests.datafiles import GRO

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--parts", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=1, help="calls per side (the median is shown)")
    ap.add_argument("--cache", default=None, help="folder for the parts (default ~/.cache/trajscale/chains-F-P)")
    ap.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated subset of {','.join(SIDES)}")
    ap.add_argument("--whole", type=int, default=5, metavar="PAIRS",
                    help="pairs of whole processes per row, trajscale CLI against the MDAnalysis script (0: none)")
    ap.add_argument("--warmup", type=int, default=1, metavar="PAIRS",
                    help="uncounted pairs of whole processes per row before those (default 1)")
    args = ap.parse_args(argv)
    cache = Path(args.cache or Path.home() / ".cache" / "trajscale" / f"chains-{args.frames}-{args.parts}")
    parts = build_chain(cache, args.frames, args.parts)
    listing = cache / "parts.txt"
    listing.write_text("\n".join(parts))
    for p in parts:   # page cache warm for every side
        Path(p).read_bytes()
    size = sum(os.path.getsize(p) for p in parts) / 1e6
    print(f"{args.frames} frames x 47,681 atoms in {len(parts)} XTC parts ({size:.0f} MB) under {cache}")
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; two processes of "
          f"pure arithmetic run {parallel_ceiling():.2f}x faster than one (the ceiling for 2 workers now)")
    res: dict[str, float] = {}
    ref = None
    for side in args.sides.split(","):
        runs = [measure(side, GRO, str(listing)) for _ in range(args.repeat)]
        if runs[0] is None:
            print(f"{LABELS[side]:40s}   MDTraj not installed")
            continue
        res[side] = statistics.median(r["t"] for r in runs)
        cpu_s = statistics.median(r["cpu"] for r in runs)
        if side == "mdanalysis":
            ref = np.array(runs[0]["rmsd"])
        elif ref is not None:
            err = float(np.max(np.abs(np.array(runs[0]["rmsd"]) - ref)))
            if err > (0.05 if side == "mdtraj" else 1e-3):   # MDTraj computes in float32
                raise SystemExit(f"{side}: RMSD differs from MDAnalysis's by {err:.2g} A")
        cpu_txt = "" if side.endswith("_warm") else f"  CPU {cpu_s:6.2f} s"
        print(f"{LABELS[side]:40s} {res[side]:7.2f} s  {args.frames / res[side]:7.0f} frames/s{cpu_txt}")
    print(f"load average after: {os.getloadavg()[0]:.2f}; parallel ceiling now {parallel_ceiling():.2f}x")
    ratios = [("trajscale serial / MDAnalysis serial (speed-up)", "mdanalysis", "serial"),
              ("processes(2) / trajscale serial (speed-up, target >= 1.8)", "serial", "processes2"),
              ("processes(2) / MDAnalysis serial (speed-up)", "mdanalysis", "processes2"),
              ("trajscale serial / MDTraj (speed-up, target >= 1.0)", "mdtraj", "serial"),
              ("warm: processes(2) / serial (speed-up)", "serial_warm", "processes2_warm")]
    for label, slow, fast in ratios:
        if slow in res and fast in res:
            print(f"{label:60s} {res[slow] / res[fast]:6.2f}x")
    return whole_processes(GRO, parts, args.whole, args.warmup) if args.whole else 0


def whole_processes(gro: str, parts: list[str], pairs: int, warmup: int = 1) -> int:
    """The headline: whole processes from outside, paired, trajscale CLI against the MDAnalysis script."""
    from trajscale.whole_runs import Pairs

    with tempfile.TemporaryDirectory() as work, Pairs(work, gro, parts, "name CA") as p:
        p.add("serial", p.trajscale(), p.mdanalysis())
        p.add("processes(2) vs multiprocessing(2)", p.trajscale("processes", n_workers=2), p.mdanalysis(2))
        p.run(pairs, warmup=warmup)
        diff = p.max_difference()
        print(f"\nwhole processes, {pairs} pairs after {warmup} warm-up pair(s) (ratio: MDAnalysis s / trajscale s)")
        print(p.table())
        print(f"max |RMSD difference| {diff:.1e} A")
    if not diff <= 1e-4:
        print(f"the RMSDs of the two sides differ by {diff:.2e} A", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
