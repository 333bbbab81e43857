"""Every analysis on the demo file: trajscale against MDAnalysis, whole runs, cold on both sides.

    python benchmarks/analyses.py [--frames 500] [--workdir demo-output] [-n 2] [--only rmsf,rdf]

Each measurement runs in a fresh Python process (imports done before the clock,
as a script's top would do; topology cache off, so both sides parse the
topology inside the timed call; trajscale's worker pool and MDAnalysis's
multiprocessing pool both start inside it). The warm figure is a second call in
the same process (pool kept, topology parsed), labelled as such.

Prints seconds per run and the ratios the project targets: every analysis
>= 5x MDAnalysis serial (cold); RMSF (which MDAnalysis cannot split) >= 1.8x
from 1 to 2 workers; and checks that the numbers agree with MDAnalysis's.
``--topology-cache`` lets trajscale load its parsed-topology cache (a fresh
process, the entry written by an earlier run), which removes the TPR parse
(~1 s, pure-Python XDR in MDAnalysis) that otherwise bounds every short run.

RDF: trajscale searches pairs with its compiled cell list (kernels/pairs.py), all
frames of a block in one call, not MDAnalysis's capped_distance per frame: the
same arithmetic, so the counts are equal, at a fraction of the cost per frame.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from _script_output import check_script_output, write_script_json

PROG = Path(__file__).name
CA = "protein and name CA"
#: name -> (trajscale expression, MDAnalysis expression, MDAnalysis parallelizable, result expressions)
CASES = {
    # RMSF of every atom (47,681: real work per frame, the case for scaling from 1 to 2 workers) and of the CAs.
    "rmsf": ("ts.RMSF(select='all')", "rms.RMSF(u.atoms)", False, ("r.rmsf", "m.results.rmsf")),
    "rmsf_ca": ("ts.RMSF(select=CA)", "rms.RMSF(u.select_atoms(CA))", False,
                ("r.rmsf", "m.results.rmsf")),
    "rgyr": ("ts.RadiusOfGyration(select='protein')",
             "AnalysisFromFunction(rgyr, u.select_atoms('protein'))", True,
             ("r.rgyr", "m.results.timeseries")),
    "average": ("ts.AverageStructure(select=CA)", "align.AverageStructure(u, select=CA)", False,
                ("r.positions", "m.results.positions")),
    "rdf": ("ts.RDF(CA, 'name OW', nbins=75, range=(0.0, 8.0))",
            "rdf.InterRDF(u.select_atoms(CA), u.select_atoms('name OW'), nbins=75, range=(0.0, 8.0))", True,
            ("r.rdf", "m.results.rdf")),
    "contacts": ("ts.Contacts(select=(A, B), radius=8.0)",
                 "contacts.Contacts(u, select=(A, B), refgroup=(u.select_atoms(A), u.select_atoms(B)), radius=8.0)",
                 True, ("r.timeseries", "m.results.timeseries")),
    "distances": ("ts.Distances(A, B)",
                  "AnalysisFromFunction(dist_array, u.select_atoms(A), u.select_atoms(B))", True,
                  ("r.distances", "m.results.timeseries")),
}

CHILD = r'''
import json, os, sys, time, warnings
warnings.filterwarnings("ignore")
import numpy as np
import MDAnalysis as mda
from MDAnalysis.analysis import align, contacts, rdf, rms
from MDAnalysis.analysis.base import AnalysisFromFunction
from MDAnalysis.lib.distances import distance_array
import trajscale as ts
from trajscale.kernels import superpose  # the compiled kernels, imported before the clock
sys.path.insert(0, {bench_dir!r})
from analyses import rgyr, dist_array
CA, A, B = {ca!r}, "protein and name CA and resid 1-60", "protein and name CA and resid 100-200"
top, h5, side, n = {top!r}, {h5!r}, {side!r}, {n}

def call():
    if side == "ts-serial":
        return {ts_expr}, None
    if side == "ts-processes":
        return None, None
    u = mda.Universe(top, h5)
    m = {mda_expr}
    return None, (m.run() if side == "mda-serial" else m.run(backend="multiprocessing", n_workers=n))

times, out = [], None
ex = None
for i in range(2):
    t0 = time.perf_counter()
    if side == "ts-processes":
        if ex is None:
            ex = ts.make_executor("processes", n)
        out = ({ts_expr_p}, None)
    else:
        out = call()
    times.append(time.perf_counter() - t0)
if ex is not None:
    ex.close()
r, m = out
value = {res_ts} if r is not None else {res_mda}
print(json.dumps({{"cold": times[0], "warm": times[1], "value": np.asarray(value, dtype=float).ravel().tolist()}}))
'''


def rgyr(ag):
    return ag.radius_of_gyration()


def dist_array(a, b):
    from MDAnalysis.lib.distances import distance_array

    return distance_array(a.positions, b.positions, box=a.dimensions)


def measure(name: str, side: str, top: str, h5: str, n: int, topology_cache: bool = False) -> dict:
    ts_expr, mda_expr, _, (res_ts, res_mda) = CASES[name]
    code = CHILD.format(bench_dir=os.path.dirname(os.path.abspath(__file__)), ca=CA, top=top, h5=h5, side=side,
                        n=n, ts_expr=f"ts.run({ts_expr}, top, h5)",
                        ts_expr_p=f"ts.run({ts_expr}, top, h5, executor=ex)",
                        mda_expr=mda_expr, res_ts=res_ts, res_mda=res_mda)
    cache = "1" if topology_cache and side.startswith("ts") else "0"   # MDAnalysis has no topology cache
    env = dict(os.environ, TRAJSCALE_TOPOLOGY_CACHE=cache, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=3600,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} {side} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from trajscale.demo import add_demo_file_arguments, build_demo_file

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_demo_file_arguments(p, frames=500)
    p.add_argument("-n", "--n-workers", type=int, default=2)
    p.add_argument("--only", default=",".join(CASES), help="comma-separated analyses")
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    p.add_argument("--topology-cache", action="store_true",
                   help="trajscale loads the parsed topology from its cache (filled by an untimed run first); "
                        "MDAnalysis parses it as always")
    args = p.parse_args(argv)
    if args.json:   # refused before the measurements, not after them
        check_script_output(PROG, args.json, args.overwrite)
    top, h5 = build_demo_file(args.workdir, args.frames, source=args.source, progress=False)
    n = args.n_workers
    if args.topology_cache:
        from trajscale.topology import load_universe

        load_universe(top)   # fills the cache entry the timed runs load
    print(f"{h5}: {args.frames} frames x 47,681 atoms; cold = first call in a fresh process; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; topology cache "
          f"{'ON for trajscale (entry filled before the clock)' if args.topology_cache else 'off on both sides'}")
    head = (f"{'analysis':<10}{'MDA serial':>12}{f'MDA mp({n})':>12}{'ts serial':>11}{f'ts proc({n})':>13}"
            f"{'ts/MDA':>8}{f'ts({n})/MDA':>11}{'S(2) ts':>9}   warm ts serial / proc   max |diff|")
    print(head)
    rows, ok = {}, True
    for name in args.only.split(","):
        parallel = CASES[name][2]
        sides = ["mda-serial", "ts-serial", "ts-processes"] + (["mda-mp"] if parallel else [])
        got = {s: measure(name, s, top, h5, n, args.topology_cache) for s in sides}
        ref = np.asarray(got["mda-serial"]["value"])
        diff = max(float(np.nanmax(np.abs(np.asarray(got[s]["value"]) - ref))) for s in ("ts-serial", "ts-processes"))
        ok &= diff <= 1e-3 * max(1.0, float(np.nanmax(np.abs(ref))))
        c = {s: got[s]["cold"] for s in got}
        mp = f"{c['mda-mp']:>12.2f}" if "mda-mp" in c else f"{'n/a':>12}"
        print(f"{name:<10}{c['mda-serial']:>12.2f}{mp}{c['ts-serial']:>11.2f}{c['ts-processes']:>13.2f}"
              f"{c['mda-serial'] / c['ts-serial']:>8.1f}{c['mda-serial'] / c['ts-processes']:>11.1f}"
              f"{c['ts-serial'] / c['ts-processes']:>9.2f}   {got['ts-serial']['warm']:.2f} / "
              f"{got['ts-processes']['warm']:.2f} s        {diff:.1e}   (load {os.getloadavg()[0]:.1f})", flush=True)
        rows[name] = {s: {"cold": got[s]["cold"], "warm": got[s]["warm"]} for s in got} | {"max_diff": diff}
    if args.json:
        write_script_json(PROG, args.json, rows, args.overwrite)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
