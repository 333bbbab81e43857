"""How the H5MD layout decides read speed: six layouts of one trajectory, read every way.

    python benchmarks/read_layouts.py [--frames 2000] [--workdir demo-output] [--repeat 3]

The demo trajectory (AdK in water from MDAnalysisTests, 47,681 atoms, the
whole-protein XTC concatenated to ``--frames`` frames) is written with
``trajscale.convert`` in six layouts:

* ``h5py``       - h5py's own chunk guess (the seed paper's slow "auto-chunked" file),
* ``frame``      - one frame per chunk, (1, n_atoms, 3),
* ``planned``    - trajscale's plan: whole frames, ~2 MiB chunks,
* ``contiguous`` - no chunks,
* ``gzip-1``, ``gzip-9`` - the planned chunks, shuffled and deflated.

For each file, in one run (median of ``--repeat``, page cache warm):

* size on disk;
* ``slab GB/s``: every frame read by trajscale's H5MDSource in blocks of
  ``--block`` frames (one ``read_direct`` per chunk-aligned slab), in GB of
  coordinates per second, and as a fraction of ``cat FILE > /dev/null``;
* ``CA span`` vs ``CA index``: the CA atoms (214, spread over a 3,341-atom span)
  over the same blocks, read as the atom span then indexed (what the Source
  does) versus whole frames then indexed - the subset read must not be slower;
* ``1-frame ms``: one frame per call, 100 frames at random;
* ``MDA fr/s``: MDAnalysis's H5MDReader iterating the file (``--mda-frames``
  frames), and the slab read's speed-up over it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

LAYOUTS = {   # name -> (chunks, compression)
    "h5py": ("h5py", "none"),
    "frame": ("frame", "none"),
    "planned": ("auto", "none"),
    "contiguous": ("contiguous", "none"),
    "gzip-1": ("auto", "gzip:1"),
    "gzip-9": ("auto", "gzip:9"),
}


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build_layouts(workdir: Path, n_frames: int, names: list[str],
                  source: tuple[str, str] | None = None) -> tuple[str, dict[str, str]]:
    from trajscale.convert.convert import convert
    from trajscale.demo import build_demo_file
    from trajscale.h5md.layout import Layout

    top, planned = build_demo_file(workdir, n_frames, source=source)
    paths = {}
    for name in names:
        chunks, comp = LAYOUTS[name]
        if name == "planned":
            paths[name] = planned
            continue
        out = workdir / "layouts" / f"adk_{n_frames}_{name}.h5md"
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            print(f"  writing {out} ({chunks}, {comp}) ...", file=sys.stderr, flush=True)
            convert(top, [planned], str(out), layout=Layout.parse(chunks, comp), overwrite=True)
        paths[name] = str(out)
    return top, paths


def cat_seconds(path: str, repeat: int) -> float:
    return median_time(lambda: subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True), repeat)


def measure(name: str, path: str, top: str, ca: np.ndarray, args) -> dict:
    import MDAnalysis as mda

    from trajscale.sources import H5MDSource

    src = H5MDSource(path)
    src.reuse_buffers = True   # as in a task: one buffer per worker, not a fresh 143 MB array per read
    n, frame_bytes = src.n_frames, src.n_atoms * 12
    chunks = src.file[src.info.dataset()].chunks
    blocks = [(a, min(n, a + args.block)) for a in range(0, n, args.block)]

    def slab(atoms=None):
        for a, b in blocks:
            src.read(a, b, atoms)

    def full_then_index():
        for a, b in blocks:
            src.read(a, b).positions[:, ca]

    slab()   # warm the page cache and HDF5's metadata
    t_slab = median_time(slab, args.repeat)
    t_span = median_time(lambda: slab(ca), args.repeat)
    t_index = median_time(full_then_index, args.repeat)
    rng = np.random.default_rng(0)
    picks = rng.integers(0, n, 100)
    t_one = median_time(lambda: [src.read(int(i), int(i) + 1) for i in picks], args.repeat) / len(picks)
    src.close()

    cat_s = cat_seconds(path, args.repeat)
    u = mda.Universe(top, path)
    m = min(n, args.mda_frames)

    def mda_iter():
        for _ in u.trajectory[:m]:
            pass

    t_mda = median_time(mda_iter, 1 if args.repeat < 3 else 2)
    u.trajectory.close()
    return {"layout": name, "chunks": chunks, "size_gb": os.path.getsize(path) / 1e9,
            "slab_gbs": n * frame_bytes / t_slab / 1e9, "cat_gbs": os.path.getsize(path) / cat_s / 1e9,
            "slab_fps": n / t_slab, "span_s": t_span, "index_s": t_index, "one_ms": t_one * 1e3,
            "mda_fps": m / t_mda}


def main(argv: list[str] | None = None) -> int:
    from trajscale.demo import add_demo_file_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_demo_file_arguments(p)
    p.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated subset of " + ",".join(LAYOUTS))
    p.add_argument("--block", type=int, default=250, help="frames per slab read (default 250, ~143 MB)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--mda-frames", type=int, default=500, help="frames MDAnalysis iterates per file")
    args = p.parse_args(argv)

    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    import MDAnalysis as mda

    names = args.layouts.split(",")
    top, paths = build_layouts(Path(args.workdir), args.frames, names, args.source)
    ca = mda.Universe(top).select_atoms("protein and name CA").indices
    print(f"{args.frames} frames x 47,681 atoms; slabs of {args.block} frames; median of {args.repeat}; "
          f"CA: {ca.size} atoms over a {ca.max() - ca.min() + 1}-atom span; {os.cpu_count()} CPUs")
    rows = []
    for name in names:
        print(f"  measuring {name} ...", file=sys.stderr, flush=True)
        rows.append(measure(name, paths[name], top, ca, args))
    print(f"\n{'layout':<11}{'chunks':<18}{'GB':>6}{'slab GB/s':>10}{'/cat':>6}{'CA span s':>10}"
          f"{'CA index s':>11}{'1-frame ms':>11}{'MDA fr/s':>9}{'slab/MDA':>9}")
    for r in rows:
        print(f"{r['layout']:<11}{r['chunks']!s:<18}{r['size_gb']:>6.2f}{r['slab_gbs']:>10.2f}"
              f"{r['slab_gbs'] / r['cat_gbs']:>6.2f}{r['span_s']:>10.3f}{r['index_s']:>11.3f}"
              f"{r['one_ms']:>11.2f}{r['mda_fps']:>9.0f}{r['slab_fps'] / r['mda_fps']:>9.1f}")
    print("\n/cat: slab bandwidth over `cat FILE > /dev/null` on the same file (target for planned >= 0.8; "
          "compressed files count uncompressed bytes).\nCA span: the Source's subset read; CA index: whole "
          "frames then indexed (the subset read must not be slower).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
