"""Lossy storage against the XTC it replaces (issue 14): size, and reading every frame, both sides.

    python benchmarks/lossy_read.py [--frames 300] [--repeat 5] [--workdir demo-output] [--only SUBSTR,...]

One XTC of ``--frames`` frames of the AdK-in-water system (47,681 atoms; copies of
MDAnalysisTests' 10 frames, written at XTC's 0.001 nm) is converted by ``trajscale
convert --precision 0.01`` (XTC's precision in Å) with each encoding and codec below,
and, in one run:

* size: the H5MD file (whole file: topology arrays, box, step/time included) / the XTC;
* warm: every frame's positions, all atoms, read in a running process with the page
  cache warm - MDAnalysis iterating the XTC (``for ts in u.trajectory``), trajscale's
  H5MD source reading chunk-aligned blocks of ~64 frames - best of ``--repeat``
  passes, the passes of every file interleaved (a burst of load on a shared machine
  hits all of them); ``cpu`` is the ratio of CPU times;
* cold: the same read as a whole run in a new Python process (imports, file open,
  loading the compiled kernels on trajscale's side; MDAnalysis's offsets cached beforehand, as a user's
  second run finds them), best of ``--repeat``, interleaved;
* err: the largest difference from MDAnalysis's values (the XTC's are multiples of 0.01 Å).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

#: name -> (compression, encoding); precision 0.01 Å for all but "plain float32"
FILES = {"plain float32": ("none", None),
         "deltas + blosc-lz4 (default)": ("blosc-lz4", "deltas"),
         "deltas + blosc-zstd": ("blosc-zstd", "deltas"),
         "deltas32 + blosc-zstd (before)": ("blosc-zstd", "deltas32"),
         "floats + blosc-zstd": ("blosc-zstd", "floats")}

MDA_READ = ("import sys, MDAnalysis as mda\n"
            "u = mda.Universe(sys.argv[1], sys.argv[2])\n"
            "for ts in u.trajectory:\n    ts.positions\n")
TS_READ = ("import sys\nfrom trajscale.sources import open_source\n"
           "with open_source(sys.argv[2]) as s:\n"
           "    per = -(-64 // s.chunk_frames) * s.chunk_frames\n"
           "    for a in range(0, s.n_frames, per):\n        s.read(a, min(s.n_frames, a + per))\n")


def make_xtc(tpr: str, xtc: str, out: Path, frames: int) -> None:
    import MDAnalysis as mda

    u = mda.Universe(tpr, xtc)
    n = u.trajectory.n_frames
    with mda.Writer(str(out), u.atoms.n_atoms) as w:
        for k in range(frames):
            u.trajectory[k % n]
            w.write(u.atoms)


def warm_mda(u) -> None:
    for ts in u.trajectory:
        _ = ts.positions   # reading the attribute makes MDAnalysis decode the frame


def warm_ts(src) -> None:
    per = -(-64 // src.chunk_frames) * src.chunk_frames
    for a in range(0, src.n_frames, per):
        src.read(a, min(src.n_frames, a + per))


def timed(fn, best: list[float]) -> None:
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    best[0] = min(best[0], time.perf_counter() - t0)
    best[1] = min(best[1], time.process_time() - c0)


def cold(code: str, top: str, path: str, best: list[float]) -> None:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, top, path], check=True)
    best[0] = min(best[0], time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--workdir", default="demo-output")
    p.add_argument("--only", default=None, help="comma-separated substrings of the files to run (the XTC always)")
    args = p.parse_args(argv)

    import MDAnalysis as mda
    from MDAnalysisTests import datafiles as D

    from trajscale.convert.convert import convert
    from trajscale.h5md.layout import Layout
    from trajscale.sources import open_source

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    xtc = work / f"water_{args.frames}.xtc"
    if not xtc.exists():
        make_xtc(D.TPR, D.XTC, xtc, args.frames)
    paths = {}
    only = args.only.split(",") if args.only else None
    for name, (comp, enc) in FILES.items():
        if only and not any(o in name for o in only):
            continue
        path = work / f"water_{args.frames}_{comp}_{enc or 'lossless'}.h5md"
        if not path.exists():
            convert(D.TPR, [str(xtc)], str(path), layout=Layout.parse("auto", comp), velocities=False,
                    forces=False, precision=0.01 if enc else None, encoding=enc or "floats")
        paths[name] = str(path)

    u = mda.Universe(D.TPR, str(xtc))   # (offsets built and cached here, outside every clock)
    ref = u.trajectory.timeseries(order="fac").astype(np.float64)
    sources = {n: open_source(pth) for n, pth in paths.items()}
    for s in sources.values():
        s.reuse_buffers = True
        warm_ts(s)   # page cache and the compiled kernels
    warm_mda(u)
    load0 = os.getloadavg()[0]
    best = {n: [math.inf, math.inf] for n in ["XTC via MDAnalysis", *paths]}
    best_cold = {n: [math.inf] for n in best}
    for _ in range(args.repeat):
        timed(lambda: warm_mda(u), best["XTC via MDAnalysis"])
        for n, s in sources.items():
            timed(lambda s=s: warm_ts(s), best[n])
        cold(MDA_READ, D.TPR, str(xtc), best_cold["XTC via MDAnalysis"])
        for n, pth in paths.items():
            cold(TS_READ, D.TPR, pth, best_cold[n])
    gb = ref.shape[0] * ref.shape[1] * 12 / 1e9
    xw, xc = best["XTC via MDAnalysis"]
    xcold = best_cold["XTC via MDAnalysis"][0]
    print(f"{ref.shape[0]} frames x {ref.shape[1]} atoms; {os.cpu_count()} CPUs, load {load0:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; best of {args.repeat} interleaved passes")
    print(f"{'file':<32}{'size/XTC':>9}{'warm GB/s':>10}{'warm x':>8}{'cpu x':>7}{'cold s':>8}{'cold x':>8}"
          f"{'err A':>8}")
    print(f"{'XTC via MDAnalysis':<32}{1:>9.3f}{gb / xw:>10.2f}{1:>8.2f}{1:>7.2f}{xcold:>8.2f}{1:>8.2f}{0:>8.4f}")
    for n, pth in paths.items():
        w, c = best[n]
        err = float(np.abs(sources[n].read(0, sources[n].n_frames).positions - ref).max())
        print(f"{n:<32}{os.path.getsize(pth) / xtc.stat().st_size:>9.3f}{gb / w:>10.2f}{xw / w:>8.2f}"
              f"{xc / c:>7.2f}{best_cold[n][0]:>8.2f}{xcold / best_cold[n][0]:>8.2f}{err:>8.4f}", flush=True)
    for s in sources.values():
        s.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
