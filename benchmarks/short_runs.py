"""Short runs, whole calls: trajscale serial against MDAnalysis on a GRO topology, cold and warm.

    python benchmarks/short_runs.py [--frames 1000] [--workdir demo-output] [--repeat 3]

The system is AdK in water (47,681 atoms, GRO topology: no types or masses,
so MDAnalysis guesses them) over ``--frames`` frames of a frame-chunked H5MD
file. Each side is one whole call, timed in the process that makes it:

* trajscale:  ``ts.run(ts.RMSD(select=SEL), GRO, H5MD, executor="serial")``
* MDAnalysis: ``rms.RMSD(mda.Universe(GRO, H5MD), select=SEL).run()``

Cold: a new interpreter per call (imports of MDAnalysis and trajscale before
the clock, as a script's first lines), an empty topology cache
(``TRAJSCALE_CACHE_DIR`` a new folder); the first call in that process, so
trajscale pays its topology parse, attribute guessing and loading the compiled
kernels (built at install). Warm: the next calls in the same
process (trajscale's topology cache filled; page cache warm on both sides).
Parsed: the next calls with trajscale's topology cache off, so both sides
parse the GRO and guess its types and masses in every call (the fair
comparison for a first call on a topology once the process is running).
Also prints how long the cached topology takes to load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import MDAnalysis as mda
from MDAnalysis.analysis import rms
import trajscale as ts
side, gro, h5, sel, repeat = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
def call():
    if side == "trajscale":
        return ts.run(ts.RMSD(select=sel), gro, h5, executor="serial").rmsd
    return rms.RMSD(mda.Universe(gro, h5), select=sel).run().results.rmsd[:, 2]
times = []
for _ in range(1 + repeat):
    t0 = time.perf_counter()
    out = call()
    times.append(time.perf_counter() - t0)
import os
os.environ["TRAJSCALE_TOPOLOGY_CACHE"] = "0"   # both sides parse the GRO, as MDAnalysis always does
parsed = []
for _ in range(repeat):
    t0 = time.perf_counter()
    call()
    parsed.append(time.perf_counter() - t0)
del os.environ["TRAJSCALE_TOPOLOGY_CACHE"]
t0 = time.perf_counter()
from trajscale.topology import load_universe
load_universe(gro, topology_coordinates=False)
t_top = time.perf_counter() - t0
print(json.dumps({"cold": times[0], "warm": times[1:], "parsed": parsed, "t_top_cached": t_top,
                  "rmsd": list(map(float, out))}))
"""


def measure(side: str, gro: str, h5: str, sel: str, repeat: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRAJSCALE_CACHE_DIR=cache)
        env.pop("TRAJSCALE_TOPOLOGY_CACHE", None)
        out = subprocess.run([sys.executable, "-c", CHILD, side, gro, h5, sel, str(repeat)],
                             capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def frame_chunked_file(workdir: str, n_frames: int) -> tuple[str, str]:
    """(GRO, H5MD): the demo's AdK frames, one frame per chunk."""
    from MDAnalysisTests.datafiles import GRO

    from trajscale.convert.convert import convert
    from trajscale.demo import build_demo_file
    from trajscale.h5md.layout import Layout
    from trajscale.sources import H5MDSource

    out = os.path.join(workdir, f"adk_{n_frames}_framechunks.h5md")
    try:
        with H5MDSource(out) as s:
            if s.n_frames == n_frames and s.chunk_frames == 1:
                return GRO, out
    except Exception:   # noqa: BLE001 - missing or stale: build it
        pass
    # The demo's 2000-frame file where it exists (or more are asked for); else only the frames asked for.
    big = os.path.exists(os.path.join(workdir, "adk_2000.h5md")) or n_frames > 2000
    _, base = build_demo_file(workdir, max(n_frames, 2000) if big else n_frames, progress=False)
    convert(GRO, [base], out, layout=Layout.parse("frame"), stop=n_frames, overwrite=True, progress=False)
    return GRO, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=1000)
    p.add_argument("--workdir", default="demo-output")
    p.add_argument("--select", default="protein and name CA")
    p.add_argument("--repeat", type=int, default=3, help="warm calls per process (median)")
    p.add_argument("--cold", type=int, default=3, help="new processes per side (median of their first calls)")
    args = p.parse_args(argv)

    import numpy as np

    gro, h5 = frame_chunked_file(args.workdir, args.frames)
    print(f"{h5}: {args.frames} frames x 47,681 atoms, one frame per chunk; GRO topology; "
          f"{args.select!r}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    rows = {side: [measure(side, gro, h5, args.select, args.repeat) for _ in range(args.cold)]
            for side in ("trajscale", "MDAnalysis")}
    diff = np.abs(np.array(rows["trajscale"][0]["rmsd"]) - np.array(rows["MDAnalysis"][0]["rmsd"])).max()
    cold = {s: statistics.median(r["cold"] for r in v) for s, v in rows.items()}
    warm = {s: statistics.median(t for r in v for t in r["warm"]) for s, v in rows.items()}
    parsed = {s: statistics.median(t for r in v for t in r["parsed"]) for s, v in rows.items()}
    t_top = statistics.median(r["t_top_cached"] for r in rows["trajscale"])
    print(f"\n{'whole call':<12}{'trajscale s':>12}{'MDAnalysis s':>14}{'ratio':>8}")
    for label, d in (("cold", cold), ("warm", warm), ("parsed", parsed)):
        print(f"{label:<12}{d['trajscale']:>12.3f}{d['MDAnalysis']:>14.3f}{d['MDAnalysis'] / d['trajscale']:>7.1f}x")
    print(f"\ncached topology (47,681 atoms, guessed types and masses) loads in {t_top * 1e3:.0f} ms "
          f"(target <= 50 ms); max |RMSD difference| {diff:.1e} A")
    return 0 if diff < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
