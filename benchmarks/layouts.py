"""The layout study (seed 000 in miniature): one trajectory stored many ways, read the same ways.

    python benchmarks/layouts.py [--frames 1000] [--workdir demo-output] [-n 2] [--json rows.json]

The demo system (AdK in water, 47,681 atoms) is written once with the planned
layout, then rewritten with ``trajscale rechunk`` (h5py's guess, one frame per
chunk, contiguous, gzip-1, gzip-9, every hdf5plugin codec, lossy at XTC's
precision as rounded floats and as atom deltas) and split into 4 segments. For each file:
size, serial slab-read rate of whole frames (trajscale's H5MD source, page
cache warm, best of 3 passes over 120 frames), one-frame read time, and a CA RMSD run on processes(n)
(whole run, pool started in the call) and on mpi(n) (``mpiexec -n n trajscale run rmsd ... --executor
mpi``; the run's own t_total from its report, so interpreter start-up and imports are left out). The
XTC read by MDAnalysis is the row users compare with.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from _script_output import check_script_output, write_script_json

PROG = Path(__file__).name


def variants(planned: str, workdir: Path, only: list[str] | None = None) -> dict[str, str]:
    """name -> path of every layout (or of those whose names contain one of ``only``), made from the
    planned file with rechunk/split."""
    from trajscale.convert.rechunk import rechunk
    from trajscale.convert.split import split
    from trajscale.h5md.layout import Layout

    specs = {"h5py guess": ("h5py", "none", None), "frame chunks": ("frame", "none", None),
             "contiguous": ("contiguous", "none", None), "gzip-1": ("auto", "gzip:1", None),
             "gzip-9": ("auto", "gzip:9", None), "lossy 0.01 A + gzip-4": ("auto", "gzip:4", 0.01)}
    try:
        import hdf5plugin  # noqa: F401

        specs |= {"zstd": ("auto", "zstd", None), "lz4": ("auto", "lz4", None),
                  "blosc-zstd": ("auto", "blosc-zstd", None), "blosc-lz4": ("auto", "blosc-lz4", None),
                  "lossy 0.01 A + zstd": ("auto", "zstd", 0.01),
                  "lossy 0.01 A + blosc-zstd": ("auto", "blosc-zstd", 0.01),
                  "lossy deltas 0.01 A + blosc-zstd": ("auto", "blosc-zstd", (0.01, "deltas")),
                  "lossy deltas 0.01 A + blosc-lz4": ("auto", "blosc-lz4", (0.01, "deltas"))}
    except ImportError:
        print("hdf5plugin not installed: zstd/lz4/blosc rows left out")
    out = {"planned (auto)": planned}
    if only:
        specs = {k: v for k, v in specs.items() if any(o in k for o in only)}
    for name, (chunks, comp, lossy) in specs.items():
        precision, encoding = lossy if isinstance(lossy, tuple) else (lossy, "floats")
        # (deltas: named by the stored encoding, so a file of an earlier one is not reused)
        tag = {"deltas": "deltas16refs"}.get(encoding, encoding)
        path = workdir / f"layout_{chunks}_{comp.replace(':', '')}" \
                         f"{f'_lossy_{tag}' if precision else ''}.h5md"
        if not path.exists():
            rechunk(planned, path, Layout.parse(chunks, comp), precision=precision, encoding=encoding)
        out[name] = str(path)
    if not only or any(o in "4 segments" for o in only):
        seg = workdir / "layout_segments4"
        if not (seg / "index.json").exists():
            split(planned, seg, 4)
        out["4 segments"] = str(seg)
    return out


def size_of(path: str) -> int:
    p = Path(path)
    return sum(f.stat().st_size for f in p.iterdir()) if p.is_dir() else p.stat().st_size


def slab_rate(path: str, frames: int = 120, repeat: int = 3) -> tuple[float, float]:
    """Whole-frame slab reads of the first ``frames`` frames (GB/s, best of ``repeat`` passes: on a
    shared machine the best pass is the one least slowed by others) and the median one-frame read (ms)."""
    from trajscale.sources import open_source

    with open_source(path) as src:
        src.reuse_buffers = True
        per = -(-64 // src.chunk_frames) * src.chunk_frames   # chunk-aligned, as the executors' blocks
        n = min(frames, src.n_frames)
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for a in range(0, n, per):
                src.read(a, min(n, a + per))
            best = min(best, time.perf_counter() - t0)
        rate = n * src.n_atoms * 12 / 1e9 / best
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


def rmsd_mpi(top: str, path: str, n: int) -> float:
    """t_total of ``mpiexec -n n trajscale run rmsd TOP PATH --executor mpi`` (from its report); nan if it fails."""
    import shutil
    import subprocess
    import sys
    import tempfile

    exe = shutil.which("mpiexec.mpich") or shutil.which("mpiexec")
    if exe is None:
        return float("nan")
    with tempfile.TemporaryDirectory() as d:
        report = Path(d) / "report.json"
        cmd = [exe, "-n", str(n), sys.executable, "-m", "trajscale.cli.main", "-q", "run", "rmsd", top, path,
               "--executor", "mpi", "--report", str(report)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
        if done.returncode or not report.exists():
            print(f"  mpi run failed on {path}: {done.stderr.strip().splitlines()[-1:] }")
            return float("nan")
        return float(json.loads(report.read_text())["t_total"])


def xtc_reference(top: str, xtc: Path, frames: int) -> tuple[float, float]:
    """(bytes the XTC would take for ``frames`` frames, GB/s of float32 MDAnalysis decodes it at)."""
    import MDAnalysis as mda

    if not xtc.exists():
        from trajscale.demo import make_whole_xtc

        make_whole_xtc(xtc)
    u = mda.Universe(top, str(xtc))
    n = u.trajectory.n_frames
    for _ in u.trajectory:   # warm: page cache, offsets
        pass
    best = float("inf")
    for _ in range(5):   # best pass, as slab_rate
        t0 = time.perf_counter()
        for _ in u.trajectory:
            pass
        best = min(best, time.perf_counter() - t0)
    dt = best / n
    return xtc.stat().st_size / n * frames, u.atoms.n_atoms * 12 / 1e9 / dt


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    from trajscale.demo import add_demo_file_arguments, build_demo_file

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_demo_file_arguments(p, frames=1000)
    p.add_argument("-n", "--n-workers", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    p.add_argument("--no-rmsd", action="store_true", help="skip the RMSD runs (sizes and read rates only)")
    p.add_argument("--only", default=None, help="comma-separated substrings of the layouts to run "
                                                "(the planned file always)")
    args = p.parse_args(argv)
    if args.json:   # refused before the measurements, not after them
        check_script_output(PROG, args.json, args.overwrite)
    top, planned = build_demo_file(args.workdir, args.frames, source=args.source, progress=False)
    workdir = Path(args.workdir)
    files = variants(planned, workdir, args.only.split(",") if args.only else None)
    base = size_of(planned)
    xtc_size, xtc_rate = xtc_reference(top, workdir / "adk_whole.xtc", args.frames)
    print(f"{args.frames} frames x 47,681 atoms; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; sizes "
          f"relative to the planned file ({base / 1e9:.2f} GB) and to the XTC (its size per frame x frames); "
          f"MDAnalysis reads the XTC at {xtc_rate:.2f} GB/s of float32")
    nw = args.n_workers
    print(f"{'layout':<34}{'size':>6}{'/XTC':>6}{'slab GB/s':>10}{'/XTC':>6}{'1 frame ms':>11}"
          f"{f'RMSD proc({nw}) s':>17}{f'RMSD mpi({nw}) s':>16}")
    rows = {"XTC via MDAnalysis": {"size": xtc_size, "slab_gb_s": xtc_rate}}
    for name, path in files.items():
        rate, one = slab_rate(path)
        t = float("nan") if args.no_rmsd else rmsd_run(top, path, nw)
        tm = float("nan") if args.no_rmsd else rmsd_mpi(top, path, nw)
        rows[name] = {"size": size_of(path), "slab_gb_s": rate, "one_frame_ms": one, "rmsd_s": t, "rmsd_mpi_s": tm}
        print(f"{name:<34}{size_of(path) / base:>6.2f}{size_of(path) / xtc_size:>6.2f}{rate:>10.2f}"
              f"{rate / xtc_rate:>6.1f}{one:>11.2f}{t:>17.2f}{tm:>16.2f}", flush=True)
    print(f"{'XTC via MDAnalysis':<34}{xtc_size / base:>6.2f}{1:>6.2f}{xtc_rate:>10.2f}{1:>6.1f}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if args.json:
        write_script_json(PROG, args.json, rows, args.overwrite)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
