"""mdCATH's count of trajectories in one job: time per trajectory, memory, open files and the results folder at scale.

    python benchmarks/scale.py [--size smallest|default|full] [--workdir DIR] [--workers 2]
    python benchmarks/scale.py --size full --workdir /tmp/scale-bench     # 134,950 trajectories
    python benchmarks/scale.py --size smallest --workdir /tmp/bench       # what the test suite runs
    python benchmarks/scale.py --large 30000 --workdir /tmp/scale-bench   # a mid size against 1,000

The data: ``N`` tiny trajectories (3 atoms x 2 frames, XTC, one shared PDB topology: ``make_tiny`` of
benchmarks/ensemble.py) and their CSV catalog, made once in the work folder.  The ``full`` size's large
``N`` is mdCATH's count of trajectories: 5,398 domains x 5 temperatures x 5 replicas = 134,950.

The workload, a whole process as a user runs it, serial and on processes(``--workers``)::

    trajscale run rmsd --ensemble catalog.csv --select all --executor E [-n W] --results R --out rmsd.parquet -q

at a small ``N`` and a large one.  For each run: the wall time (from just before the process starts to
just after it exits) and per trajectory, the peak RSS of its largest process (the kernel's, every process
reaped by a subreaper, as :mod:`tests.support.peak_rss`), the most files any of its processes held
open (sampled from ``/proc`` every 10 ms), the files of its results folder, and whether every trajectory's
result was saved (the folder's trajectories and the Parquet's rows: 2 per trajectory).  The targets (large
``N`` against small, same executor): exit 0, every result saved, peak RSS at most 1.5x, open files within
a fixed bound (at most 8 more than the small run's), results files at most ``N/50``, wall time per
trajectory at most 1.5x.  Exit 1 when a result is missing or a run fails; the targets are printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ensemble import finish, load_average, make_tiny, measured  # noqa: E402

#: size -> (small N, large N); the smallest (the test suite's) still saves each run's results in more than one
#: file of ``SAVE_MEMBERS`` (64) trajectories
SIZES = {"smallest": (100, 200), "default": (1000, 10000), "full": (1000, 134950)}
#: Open files past the small run's that the large run may hold (the bound does not grow with N).
FD_SLACK = 8

def run_once(work: Path, n: int, executor: str, workers: int) -> dict:
    from trajscale.ensemble.saved import MEMBERS, saved_names

    catalog = make_tiny(work, n)
    tag = f"{executor}{n}"
    results, out = work / f"{tag}-results", work / f"{tag}.parquet"
    shutil.rmtree(results, ignore_errors=True)
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", "--ensemble", str(catalog), "--select", "all",
           "--executor", executor, *(["-n", str(workers)] if executor != "serial" else []),
           "--results", str(results), "--out", str(out), "-q"]
    row = measured(cmd, work)
    if row["rc"] != 0:
        sys.exit(f"{' '.join(cmd[2:])} exited {row['rc']}:\n{row['stderr']}")
    import pyarrow.parquet as pq

    row["files"] = len(os.listdir(results / MEMBERS))
    row["saved"] = len(set(saved_names(results)))
    row["rows"] = pq.read_metadata(out).num_rows
    shutil.rmtree(results, ignore_errors=True)
    out.unlink(missing_ok=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=list(SIZES), default="default")
    p.add_argument("--workdir", default="demo-output/scale")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--large", type=int, default=None, metavar="N",
                   help="the large N in place of the size's (a mid size: 30000)")
    p.add_argument("--keep", action="store_true", help="keep the trajectories made in the work folder")
    args = p.parse_args()
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    small, large = SIZES[args.size]
    large = args.large or large
    print(f"load average before: {load_average()}")
    sides = (("serial", 1), ("processes", args.workers))
    rows = {}
    print(f"\n{'executor':<16}{'N':>8}{'wall s':>10}{'ms/traj':>9}{'peak RSS MB':>13}{'open files':>12}"
          f"{'results files':>15}{'saved':>8}", flush=True)
    complete = True
    for executor, workers in sides:
        for n in (small, large):   # (each row printed as it is measured: the full size takes a while)
            rows[executor, n] = r = run_once(work, n, executor, workers)
            name = executor if executor == "serial" else f"{executor}({args.workers})"
            print(f"{name:<16}{n:>8}{r['wall']:>10.2f}{1e3 * r['wall'] / n:>9.3f}{r['peak'] / 2**20:>13.0f}"
                  f"{r['fds']:>12}{r['files']:>15}{r['saved']:>8}", flush=True)
            complete = complete and r["saved"] == n and r["rows"] == 2 * n
    print(f"\nevery trajectory's result saved (folder and Parquet): {complete}")
    for executor, workers in sides:
        a, b = rows[executor, small], rows[executor, large]
        per = (b["wall"] / large) / (a["wall"] / small)
        rss = b["peak"] / a["peak"]
        met = per <= 1.5 and rss <= 1.5 and b["fds"] <= a["fds"] + FD_SLACK and b["files"] <= large / 50
        name = executor if executor == "serial" else f"{executor}({workers})"
        print(f"{name} {large} / {small}: per trajectory {per:.2f}x, peak RSS {rss:.2f}x, open files "
              f"{a['fds']} -> {b['fds']}, results files {b['files']} (N/50 = {large // 50}); targets met: {met}")
    finish(work, args.keep, complete)


if __name__ == "__main__":
    main()
