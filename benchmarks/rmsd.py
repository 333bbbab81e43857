"""CA RMSD on the demo file: trajscale against MDAnalysis and a raw h5py read, in one run.

    python benchmarks/rmsd.py [--frames 2000] [--workdir demo-output] [--repeat 3] [-n 2]

On the demo trajectory (AdK in water, 47,681 atoms, ``--frames`` frames, the
planned H5MD layout), median of ``--repeat`` runs, frames/s.

Headline, whole runs on both sides: each call parses the topology (trajscale's
topology cache off, as MDAnalysis has none) and a parallel run starts its
workers inside the timed call (as MDAnalysis's multiprocessing backend does):

* trajscale serial:               ``ts.run(ts.RMSD(select=SEL), TPR, FILE, executor="serial")``
* trajscale processes(n):         ``ts.run(..., executor="processes", n_workers=n)``
* MDAnalysis serial:              ``rms.RMSD(mda.Universe(TPR, FILE), select=SEL).run()``
* MDAnalysis multiprocessing(n):  ``... .run(backend="multiprocessing", n_workers=n)``

Warm, labelled as such: the Universe built once beforehand for both sides, and
trajscale's pool started once beforehand (``executor=`` a ProcessExecutor).

I/O floor: raw h5py ``read_direct`` of the same frames into a reused
``(block, atoms, 3)`` buffer, whole frames (what the seed's loops read) and
only the span of atoms holding the CA atoms (what trajscale reads), no chunk
cache; compared with trajscale serial warm (target >= 0.8x the span read).

Checks that the RMSDs agree with MDAnalysis serial.
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
    for noisy in ("MDAnalysis",):
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
          f"load average {os.getloadavg()[0]:.1f}; "
          f"{args.select!r}: {sel.size} atoms in a {hi - lo}-atom span; median of {args.repeat}; "
          f"{os.cpu_count()} CPUs; MDAnalysis {mda.__version__}")
    rows: dict[str, float] = {}

    def step(name, fn, warm=False):
        print(f"  {name} ...", file=sys.stderr, flush=True)
        t, out = timed(fn, args.repeat, warm)
        rows[name] = n / t
        return out

    nw = args.n_workers
    sel = args.select
    # Headline: whole runs, topology parsed in every call on both sides, pools started in the call.
    os.environ["TRAJSCALE_TOPOLOGY_CACHE"] = "0"
    r_ts = step("trajscale serial", lambda: ts.run(ts.RMSD(select=sel), top, h5, executor="serial"), warm=True)
    r_tp = step(f"trajscale processes({nw})",
                lambda: ts.run(ts.RMSD(select=sel), top, h5, executor="processes", n_workers=nw))
    del os.environ["TRAJSCALE_TOPOLOGY_CACHE"]
    r_mda = step("MDAnalysis serial", lambda: rms.RMSD(mda.Universe(top, h5), select=sel).run())
    r_mdp = step(f"MDAnalysis multiprocessing({nw})",
                 lambda: rms.RMSD(mda.Universe(top, h5), select=sel).run(backend="multiprocessing", n_workers=nw))
    # Warm: the Universe built beforehand for both sides; trajscale's pool started beforehand.
    step("trajscale serial, warm", lambda: ts.run(ts.RMSD(select=sel), u, h5), warm=True)
    ex = ts.make_executor("processes", nw)
    try:
        step(f"trajscale processes({nw}), warm pool",
             lambda: ts.run(ts.RMSD(select=sel), u, h5, executor=ex), warm=True)
    finally:
        ex.close()
    step("MDAnalysis serial, warm", lambda: rms.RMSD(u, select=sel).run())
    step(f"MDAnalysis multiprocessing({nw}), warm",
         lambda: rms.RMSD(u, select=sel).run(backend="multiprocessing", n_workers=nw))
    step("raw h5py, whole frames", lambda: raw_h5py(h5, n, args.block), warm=True)
    step("raw h5py, CA span", lambda: raw_h5py(h5, n, args.block, lo, hi), warm=True)

    ref = r_mda.results.rmsd[:, 2]
    diffs = {"trajscale serial": np.abs(r_ts.rmsd - ref).max(),
             f"trajscale processes({nw})": np.abs(r_tp.rmsd - ref).max(),
             f"MDAnalysis multiprocessing({nw})": np.abs(r_mdp.results.rmsd[:, 2] - ref).max()}
    print(f"\n{'':<44}{'frames/s':>10}   max |RMSD - MDAnalysis serial| (A)")
    for name, fps in rows.items():
        d = diffs.get(name)
        print(f"{name:<44}{fps:>10.0f}   " + ("" if d is None else f"{d:.1e}"))
    ratios = [
        ("trajscale serial / MDAnalysis serial (whole runs)", rows["trajscale serial"] / rows["MDAnalysis serial"], 10),
        (f"trajscale processes({nw}) / MDAnalysis multiprocessing({nw}) (whole runs)",
         rows[f"trajscale processes({nw})"] / rows[f"MDAnalysis multiprocessing({nw})"], 5),
        ("warm: trajscale serial / MDAnalysis serial",
         rows["trajscale serial, warm"] / rows["MDAnalysis serial, warm"], None),
        (f"warm: trajscale processes({nw}) / MDAnalysis multiprocessing({nw})",
         rows[f"trajscale processes({nw}), warm pool"] / rows[f"MDAnalysis multiprocessing({nw}), warm"], None),
        ("warm: trajscale serial / raw h5py CA-span read",
         rows["trajscale serial, warm"] / rows["raw h5py, CA span"], 0.8),
        ("warm: trajscale serial / raw h5py whole-frame read",
         rows["trajscale serial, warm"] / rows["raw h5py, whole frames"], None),
    ]
    print()
    for label, value, target in ratios:
        verdict = "" if target is None else f"   target >= {target:g}: {'met' if value >= target else 'NOT met'}"
        print(f"{label:<72}{value:>8.2f}x{verdict}")
    worst = max(diffs.values())
    if worst > 1e-4:
        print(f"RMSDs disagree with MDAnalysis by {worst:.2e} A", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
