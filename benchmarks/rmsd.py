"""CA RMSD on the demo file: trajscale against MDAnalysis and a raw h5py read, in one run.

    python benchmarks/rmsd.py [--frames 2000] [--workdir demo-output] [--repeat 3] [-n 2]

On the demo trajectory (AdK in water, 47,681 atoms, ``--frames`` frames, the
planned H5MD layout), with the Universe built once beforehand for everybody
(topology parsing is not timed), median of ``--repeat`` runs:

* trajscale serial:                ``ts.run(ts.RMSD(select=SEL), u, FILE)``
* trajscale processes(n):          same on a warmed process pool of ``n`` workers
* MDAnalysis serial:               ``rms.RMSD(u, select=SEL).run()``
* MDAnalysis multiprocessing(n):   ``.run(backend="multiprocessing", n_workers=n)``
* raw h5py, whole frames:          ``read_direct`` of every frame into a reused
  ``(block, n_atoms, 3)`` buffer (what the seed's loops read), and
* raw h5py, CA span:               the same for only the span of atoms holding
  the CA atoms (what trajscale reads), with no chunk cache.

Prints frames/s and the ratios the project targets: trajscale serial >= 10x
MDAnalysis serial, trajscale processes(n) >= 5x MDAnalysis multiprocessing(n),
trajscale serial >= 0.8x the raw slab read; and checks that the RMSDs agree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np


def timed(fn, repeat: int, warm: bool = False):
    """Median seconds of ``repeat`` calls (after one discarded call if ``warm``) and the last result."""
    out = fn() if warm else None
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def raw_h5py(path: str, n_frames: int, block: int, lo: int = 0, hi: int | None = None) -> None:
    import h5py

    with h5py.File(path, "r", rdcc_nbytes=0 if hi is not None else 1024**2) as f:
        ds = f["particles/all/position/value"]
        hi = ds.shape[1] if hi is None else hi
        buf = np.empty((block, hi - lo, 3), dtype=np.float32)
        for a in range(0, n_frames, block):
            b = min(n_frames, a + block)
            ds.read_direct(buf, np.s_[a:b, lo:hi, :], np.s_[0:b - a])


def main(argv: list[str] | None = None) -> int:
    from trajscale.demo import add_demo_file_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_demo_file_arguments(p)
    p.add_argument("--select", default="protein and name CA")
    p.add_argument("-n", "--n-workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--block", type=int, default=250, help="frames per raw h5py read")
    args = p.parse_args(argv)

    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("MDAnalysis", "numba"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms

    import trajscale as ts
    from trajscale.demo import build_demo_file

    top, h5 = build_demo_file(args.workdir, args.frames, source=args.source)
    u = mda.Universe(top, h5)
    n = u.trajectory.n_frames
    sel = u.select_atoms(args.select).indices
    lo, hi = int(sel.min()), int(sel.max()) + 1
    print(f"{h5}: {n} frames x {u.atoms.n_atoms} atoms ({os.path.getsize(h5) / 1e9:.2f} GB); "
          f"{args.select!r}: {sel.size} atoms in a {hi - lo}-atom span; median of {args.repeat}; "
          f"{os.cpu_count()} CPUs; MDAnalysis {mda.__version__}")
    rows: dict[str, float] = {}

    def step(name, fn, warm=False):
        print(f"  {name} ...", file=sys.stderr, flush=True)
        t, out = timed(fn, args.repeat, warm)
        rows[name] = n / t
        return out

    nw = args.n_workers
    step("raw h5py, whole frames", lambda: raw_h5py(h5, n, args.block), warm=True)
    step("raw h5py, CA span", lambda: raw_h5py(h5, n, args.block, lo, hi))
    r_ts = step("trajscale serial", lambda: ts.run(ts.RMSD(select=args.select), u, h5), warm=True)
    ex = ts.make_executor("processes", nw)
    try:
        r_tp = step(f"trajscale processes({nw})",
                    lambda: ts.run(ts.RMSD(select=args.select), u, h5, executor=ex), warm=True)
    finally:
        ex.close()
    r_mda = step("MDAnalysis serial", lambda: rms.RMSD(u, select=args.select).run())
    r_mdp = step(f"MDAnalysis multiprocessing({nw})",
                 lambda: rms.RMSD(u, select=args.select).run(backend="multiprocessing", n_workers=nw))

    ref = r_mda.results.rmsd[:, 2]
    diffs = {"trajscale serial": np.abs(r_ts.rmsd - ref).max(),
             f"trajscale processes({nw})": np.abs(r_tp.rmsd - ref).max(),
             f"MDAnalysis multiprocessing({nw})": np.abs(r_mdp.results.rmsd[:, 2] - ref).max()}
    print(f"\n{'':<34}{'frames/s':>10}   max |RMSD - MDAnalysis serial| (A)")
    for name, fps in rows.items():
        d = diffs.get(name)
        print(f"{name:<34}{fps:>10.0f}   " + ("" if d is None else f"{d:.1e}"))
    ratios = [
        ("trajscale serial / MDAnalysis serial", rows["trajscale serial"] / rows["MDAnalysis serial"], 10),
        (f"trajscale processes({nw}) / MDAnalysis multiprocessing({nw})",
         rows[f"trajscale processes({nw})"] / rows[f"MDAnalysis multiprocessing({nw})"], 5),
        ("trajscale serial / raw h5py whole-frame slab read",
         rows["trajscale serial"] / rows["raw h5py, whole frames"], 0.8),
        ("trajscale serial / raw h5py CA-span slab read",
         rows["trajscale serial"] / rows["raw h5py, CA span"], None),
    ]
    print()
    for label, value, target in ratios:
        verdict = "" if target is None else f"   target >= {target:g}: {'met' if value >= target else 'NOT met'}"
        print(f"{label:<62}{value:>8.2f}x{verdict}")
    worst = max(diffs.values())
    if worst > 1e-4:
        print(f"RMSDs disagree with MDAnalysis by {worst:.2e} A", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
