"""The layout study (seed 000 in miniature): one trajectory stored many ways, read the same ways.

    python benchmarks/layouts.py [--frames 1000] [--workdir demo-output] [-n 2] [--json rows.json]

The demo system (AdK in water, 47,681 atoms) is written once with the planned
layout, then rewritten with ``trajscale rechunk`` (h5py's guess, one frame per
chunk, contiguous, gzip-1, gzip-9, lossy at XTC's precision + gzip, every
hdf5plugin codec that is installed) and split into 4 segments. For each file:
size, serial slab-read rate of whole frames (trajscale's H5MD source, page
cache warm), one-frame read time, and a CA RMSD run on processes(n) (whole
run). The XTC read by MDAnalysis is the row users compare with.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


def variants(planned: str, workdir: Path) -> dict[str, str]:
    """name -> path of every layout, made from the planned file with rechunk/split."""
    from trajscale.convert.rechunk import rechunk
    from trajscale.convert.split import split
    from trajscale.store.layout import Layout

    specs = {"h5py guess": ("h5py", "none", None), "frame chunks": ("frame", "none", None),
             "contiguous": ("contiguous", "none", None), "gzip-1": ("auto", "gzip:1", None),
             "gzip-9": ("auto", "gzip:9", None), "lossy 0.01 A + gzip-4": ("auto", "gzip:4", 0.01)}
    try:
        import hdf5plugin  # noqa: F401

        specs |= {"zstd": ("auto", "zstd", None), "blosc-lz4": ("auto", "blosc", None),
                  "lossy 0.01 A + zstd": ("auto", "zstd", 0.01)}
    except ImportError:
        print("hdf5plugin not installed: zstd/blosc rows left out")
    out = {"planned (auto)": planned}
    for name, (chunks, comp, precision) in specs.items():
        path = workdir / f"layout_{name.split()[0].replace('-', '')}_{chunks}_{comp.replace(':', '')}" \
                         f"{'_lossy' if precision else ''}.h5md"
        if not path.exists():
            rechunk(planned, path, Layout.parse(chunks, comp), precision=precision)
        out[name] = str(path)
    seg = workdir / "layout_segments4"
    if not (seg / "index.json").exists():
        split(planned, seg, 4)
    out["4 segments"] = str(seg)
    return out


def size_of(path: str) -> int:
    p = Path(path)
    return sum(f.stat().st_size for f in p.iterdir()) if p.is_dir() else p.stat().st_size


def slab_rate(path: str) -> tuple[float, float]:
    """Whole-frame slab reads of the whole file (GB/s) and the median one-frame read (ms)."""
    from trajscale.sources import open_source

    with open_source(path) as src:
        src.reuse_buffers = True
        per = max(src.chunk_frames, 64)
        t0 = time.perf_counter()
        for a in range(0, src.n_frames, per):
            src.read(a, min(src.n_frames, a + per))
        rate = src.n_frames * src.n_atoms * 12 / 1e9 / (time.perf_counter() - t0)
        one = []
        for f in range(0, src.n_frames, max(1, src.n_frames // 20)):
            t = time.perf_counter()
            src.read(f, f + 1)
            one.append(time.perf_counter() - t)
    return rate, 1e3 * statistics.median(one)


def rmsd_run(top: str, path: str, n: int) -> float:
    import trajscale as ts

    t0 = time.perf_counter()
    ts.run(ts.RMSD(select="protein and name CA"), top, path, executor="processes", n_workers=n)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    from trajscale.demo import add_demo_file_arguments, build_demo_file

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_demo_file_arguments(p, frames=1000)
    p.add_argument("-n", "--n-workers", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    top, planned = build_demo_file(args.workdir, args.frames, source=args.source, progress=False)
    workdir = Path(args.workdir)
    files = variants(planned, workdir)
    base = size_of(planned)
    print(f"{args.frames} frames x 47,681 atoms; {os.cpu_count()} CPUs; sizes relative to the planned file "
          f"({base / 1e9:.2f} GB)")
    print(f"{'layout':<24}{'size':>7}{'slab GB/s':>11}{'1 frame ms':>12}{f'RMSD proc({args.n_workers}) s':>18}")
    rows = {}
    for name, path in files.items():
        rate, one = slab_rate(path)
        t = rmsd_run(top, path, args.n_workers)
        rows[name] = {"size": size_of(path), "slab_gb_s": rate, "one_frame_ms": one, "rmsd_s": t}
        print(f"{name:<24}{size_of(path) / base:>7.2f}{rate:>11.2f}{one:>12.2f}{t:>18.2f}", flush=True)
    xtc = workdir / "adk_whole.xtc"
    if xtc.exists():
        import MDAnalysis as mda

        u = mda.Universe(top, str(xtc))
        t0 = time.perf_counter()
        for _ in u.trajectory:
            pass
        dt = (time.perf_counter() - t0) / u.trajectory.n_frames
        rate = u.atoms.n_atoms * 12 / 1e9 / dt
        rows["XTC via MDAnalysis"] = {"size_per_frame": xtc.stat().st_size / u.trajectory.n_frames,
                                      "slab_gb_s": rate}
        print(f"{'XTC via MDAnalysis':<24}{xtc.stat().st_size / u.trajectory.n_frames * args.frames / base:>7.2f}"
              f"{rate:>11.2f}  (decoded float32 GB/s; size scaled to {args.frames} frames)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
