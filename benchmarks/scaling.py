"""Strong scaling of the CA RMSD on every executor, plus an MDAnalysis-under-MPI baseline.

    python benchmarks/scaling.py [FILE.h5md] [--topology TPR] [--max-n 16] [--repeat 3]
                                 [--driver mpio|default] [--baseline-n 2,16] [--source TPR XTC]

Without a file, the demo trajectory is built (or reused) with
``trajscale.demo.build_demo_file('demo-output', 2000)``: 2000 frames x 47,681
atoms of AdK in water, about 1.1 GB.

What is timed: ``RunReport.t_total`` - from the start of ``trajscale.run``
(topology included) to the gathered result - the median of ``--repeat`` runs.
Serial, processes and Dask run in this process; process pools and Dask
LocalClusters are started once per N and warmed with one discarded run, so
worker start-up is not counted.  MPI runs are launched as
``mpiexec -n N python -m trajscale.cli.main run rmsd ... --executor mpi
--report tmp.json`` and the report is read back (interpreter start-up and
imports are not counted).  The baseline, ``mda_mpi_baseline.py``, is
MDAnalysis's own H5MD reader opened with the same driver (``mpio`` where h5py
has parallel HDF5, else each rank's own read-only handle) and the seed's
per-frame loop, timed the same way (Universe creation to gathered result).
Repeated runs read the file from the page cache once it fits in memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _script_output import check_script_output, write_script_json

PROG = Path(__file__).name

HERE = Path(__file__).resolve().parent
PHASES = ("t_init_top", "t_init_traj", "t_io", "t_compute", "t_wait", "t_comm")


MPIEXEC: str | None = None   # --mpiexec, else the system MPICH's


def mpiexec() -> str:
    import shutil

    exe = MPIEXEC or shutil.which("mpiexec.mpich") or shutil.which("mpiexec")
    if exe is None:
        raise SystemExit("no mpiexec on PATH")
    return exe


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def median_run(runs: list[dict]) -> dict:
    """The run with the median total time (its breakdown is the one shown)."""
    runs = sorted(runs, key=lambda r: r["t_total"])
    return runs[(len(runs) - 1) // 2]


def time_inprocess(name: str, n: int, top: str, h5: str, select: str, repeat: int) -> dict:
    """Median of ``repeat`` runs on one warmed executor (pool/cluster started once)."""
    import trajscale as ts

    ex = ts.make_executor(name, n)
    runs = []
    try:
        for i in range(repeat + (0 if name == "serial" else 1)):
            r = ts.run(ts.RMSD(select=select), top, h5, executor=ex)
            if name != "serial" and i == 0:
                continue   # warm-up: workers start and open the file
            runs.append(_summary(r.report.to_dict()))
    finally:
        ex.close()
    return _aggregate(runs)


def time_mpi(n: int, top: str, h5: str, select: str, repeat: int, driver: str) -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            rep = Path(tmp) / f"r{i}.json"
            cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "trajscale.cli.main", "-q", "run", "rmsd",
                   top, h5, "--select", select, "--executor", "mpi", "--driver", driver,
                   "--report", str(rep), "--no-progress"]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600, check=False)
            if proc.returncode:
                raise SystemExit(f"mpi run failed:\n{proc.stderr[-2000:]}")
            runs.append(_summary(json.loads(rep.read_text())))
    return _aggregate(runs)


def time_mda_baseline(n: int, top: str, h5: str, select: str, repeat: int, driver: str) -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            out = Path(tmp) / f"b{i}.json"
            cmd = [mpiexec(), "-n", str(n), sys.executable, str(HERE / "mda_mpi_baseline.py"), top, h5,
                   "--select", select, "--driver", driver, "--out", str(out)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600, check=False)
            if proc.returncode:
                raise SystemExit(f"MDAnalysis baseline failed:\n{proc.stderr[-2000:]}")
            d = json.loads(out.read_text())
            w0 = d["workers"][0]
            runs.append({"t_total": d["t_total"], "t_prepare": w0["t_init_top"] + w0["t_init_traj"],
                         "n_frames": d["n_frames"], "workers": d["workers"]})
    return _aggregate(runs)


def _summary(report: dict) -> dict:
    return {"t_total": report["t_total"], "t_prepare": report["t_prepare"], "n_frames": report["n_frames"],
            "workers": [{k: w.get(k, 0.0) for k in ("worker", "frames", *PHASES)} for w in report["workers"]]}


def _aggregate(runs: list[dict]) -> dict:
    med = median_run(runs)
    return {**med, "t_all": [r["t_total"] for r in runs], "t_total": statistics.median(r["t_total"] for r in runs),
            "t_map": statistics.median(r["t_total"] - r["t_prepare"] for r in runs)}


def _progress(rows: list[dict], json_path: str | None, overwrite: bool) -> None:
    """Show each result as it comes (a long run cut off still leaves its numbers in ``json_path``).

    The first write replaces an existing file only with ``overwrite``; later ones replace this run's own.
    """
    r = rows[-1]
    print(f"  {r['executor']} N={r['n']}: t_total {r['t_total']:.3f} s, t_map {r['t_map']:.3f} s "
          f"(runs {' '.join(f'{t:.2f}' for t in r['t_all'])})", file=sys.stderr, flush=True)
    if json_path:
        write_script_json(PROG, json_path, rows, overwrite or len(rows) > 1)


def print_table(rows: list[dict]) -> None:
    base = {r["executor"]: r["t_total"] for r in rows if r["n"] == 1}
    base_map = {r["executor"]: r["t_map"] for r in rows if r["n"] == 1}
    print("\nt_total: whole run incl. topology; t_map: after the prepare step (tasks, gather, reduce)")
    print(f"{'executor':<16}{'N':>3}{'t_total s':>11}{'frames/s':>10}{'S(N)':>7}{'E(N)':>7}"
          f"{'t_map s':>9}{'S_map':>7}   runs (s)")
    for r in rows:
        t1 = base.get(r["executor"])
        s = t1 / r["t_total"] if t1 else float("nan")
        print(f"{r['executor']:<16}{r['n']:>3}{r['t_total']:>11.3f}{r['n_frames'] / r['t_total']:>10.0f}"
              f"{s:>7.2f}{s / r['n']:>7.2f}{r['t_map']:>9.3f}"
              f"{base_map.get(r['executor'], float('nan')) / r['t_map']:>7.2f}   "
              + " ".join(f"{t:.2f}" for t in r["t_all"]))
    print("\nper-worker breakdown of the median run (seconds):")
    print(f"{'executor':<16}{'N':>3}  {'worker':<24}{'frames':>7}" + "".join(f"{p[2:]:>11}" for p in PHASES))
    for r in rows:
        for w in r["workers"]:
            print(f"{r['executor']:<16}{r['n']:>3}  {str(w['worker'])[:24]:<24}{w['frames']:>7}"
                  + "".join(f"{w.get(p, 0.0):>11.3f}" for p in PHASES))


def main(argv: list[str] | None = None) -> int:
    from trajscale.demo import add_demo_file_arguments

    p = argparse.ArgumentParser(description="Strong scaling of the CA RMSD on every executor.")
    p.add_argument("h5md", nargs="?", default=None, help="H5MD file (default: the demo file)")
    p.add_argument("--topology", default=None, help="topology (default: the demo's TPR)")
    add_demo_file_arguments(p)
    p.add_argument("--select", default="protein and name CA")
    p.add_argument("--executors", default="serial,processes,dask,mpi")
    p.add_argument("--max-n", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-baseline", action="store_true", help="skip the MDAnalysis MPI baseline")
    p.add_argument("--baseline-n", default="2", help="rank counts of the MDAnalysis MPI baseline (comma-separated)")
    p.add_argument("--driver", choices=["mpio", "default"], default=None,
                   help="HDF5 driver of the MPI runs (default: mpio where h5py has MPI)")
    p.add_argument("--mpiexec", default=None, help="mpiexec to launch MPI runs with (default: the system MPICH's)")
    p.add_argument("--json", default=None, help="also write the numbers here (after each result)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    args = p.parse_args(argv)
    if args.json:   # refused before the measurements, not after them
        check_script_output(PROG, args.json, args.overwrite)
    global MPIEXEC
    MPIEXEC = args.mpiexec
    from trajscale.parallel import h5py_has_mpi

    driver = args.driver or ("mpio" if h5py_has_mpi() else "default")

    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    try:
        import distributed  # noqa: F401 - configures its loggers on import; quieten them after
    except ImportError:
        pass
    for noisy in ("distributed", "MDAnalysis"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    from trajscale.demo import adk_files, build_demo_file

    if args.h5md is None:
        top, h5 = build_demo_file(args.workdir, args.frames, source=args.source)
    else:
        h5 = args.h5md
        top = args.topology or (args.source[0] if args.source else adk_files()[0])
    ns = [n for n in (1, 2, 4, 8, 16) if n <= args.max_n]
    print(f"file {h5} ({os.path.getsize(h5) / 1e9:.2f} GB), topology {top}, selection {args.select!r}; "
          f"N in {ns}, median of {args.repeat}; {os.cpu_count()} CPUs")
    rows = []
    for name in args.executors.split(","):
        for n in ([1] if name == "serial" else ns):
            print(f"  {name} N={n} ...", flush=True, file=sys.stderr)
            if name == "mpi":
                res = time_mpi(n, top, h5, args.select, args.repeat, driver)
            else:
                res = time_inprocess(name, n, top, h5, args.select, args.repeat)
            rows.append({"executor": name if name != "mpi" else f"mpi ({driver})", "n": n, **res})
            _progress(rows, args.json, args.overwrite)
    base_rows = []
    for n in ([] if args.no_baseline else [int(x) for x in args.baseline_n.split(",") if int(x) <= args.max_n]):
        print(f"  MDAnalysis MPI baseline N={n} ...", flush=True, file=sys.stderr)
        base_rows.append({"executor": "MDAnalysis-MPI", "n": n,
                          **time_mda_baseline(n, top, h5, args.select, args.repeat, driver)})
        _progress(rows + base_rows, args.json, args.overwrite)
    rows += base_rows
    print_table(rows)
    for base in base_rows:
        mpi = next((r for r in rows if r["executor"].startswith("mpi") and r["n"] == base["n"]), None)
        if mpi is None:
            continue
        print()
        for what, key in (("whole run", "t_total"), ("after topology/Universe set-up", "t_map")):
            fps_ts = mpi["n_frames"] / mpi[key]
            fps_mda = base["n_frames"] / base[key]
            print(f"trajscale mpi({base['n']}) / MDAnalysis-MPI({base['n']}), {what}: "
                  f"{fps_ts:,.0f} / {fps_mda:,.0f} frames/s = {fps_ts / fps_mda:.1f}x")
    if args.json:
        write_script_json(PROG, args.json, rows, args.overwrite or bool(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
