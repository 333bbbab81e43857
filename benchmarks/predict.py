"""Predicted against measured: ``trajscale report --predict`` from a serial report, out of sample.

    python benchmarks/predict.py [--ns 2,4,8,16] [--executors processes,mpi,dask] [--frames 200] [--json OUT]
    python benchmarks/predict.py --quick          # the smallest cell: the machinery, not a measurement
    python benchmarks/predict.py --probe-check    # the probe's cold read rate against dd and fio
    python benchmarks/predict.py --seeds          # the seeds' machines as profiles, against their figures

The matrix: four workloads (all on AdK in water, 47,681 atoms) x executors x N, on this machine
(N beyond its cores is oversubscribed):

* ``rmsd``: RMSD of all atoms on H5MD (I/O-bound);
* ``rdf``: RDF of CA against water O on H5MD (compute-bound);
* ``rmsf``: RMSF of all atoms on H5MD;
* ``xtc``: RMSD of the CA atoms over a chain of XTC parts read in place.

The constants are fixed before any cell runs, from two sources that share no run with the matrix:

* ``trajscale probe`` on the folder of the data (storage read curve, open latency, worker starts, and
  what moving a pickled object to a worker process costs);
* the calibration set of ``trajscale probe --launch`` (:mod:`trajscale.report.calibrate`): the
  radius of gyration of a synthetic 30,000-atom system, 96 frames, as one H5MD file (every atom, and
  3,000 selected) and as 4 XTC parts, run serially and at N = cores and 4 x cores on each executor.
  It gives each executor's launch line (``LaunchLine``: seconds up to the cores, CPU seconds per
  further worker on each format and per selected atom, and what a collective MPI-IO open adds per
  further rank).

Each workload then runs once serially with ``--report``; every prediction comes from that serial
report alone (``fit`` on it, ``predict_model`` for the calibrated machine).  Each cell is the whole
``trajscale run`` process (under ``mpiexec -n N`` for MPI) timed from outside, launch to exit.
Errors are predicted / measured - 1; the script prints each cell, the median and the largest
absolute error, and the load average before and after (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from trajscale.report.calibrate import mpiexec  # noqa: E402 (after the sys.path line)
from trajscale.report.calibrate import whole_run as run_timed  # noqa: E402
from trajscale.util import check_script_output, write_script_json  # noqa: E402

PROG = Path(__file__).name
TARGET_MEDIAN, TARGET_MAX = 0.15, 0.30


def whole_run(args: list[str], executor: str = "serial", n: int = 1) -> float:
    """Seconds from launching ``trajscale ARGS`` (with its executor) to its exit, timed from outside
    (the calibration's own runner, so that the matrix and the calibration time runs alike)."""
    return run_timed(args, executor, n, timeout=900)


def workloads(folder: Path, frames: int) -> dict[str, list[str]]:
    """name -> ``trajscale run`` arguments (without the executor)."""
    from chains import build_chain
    from MDAnalysisTests.datafiles import GRO

    from trajscale.demo import build_demo_file

    tpr, h5 = build_demo_file(folder, frames, progress=False)
    parts = build_chain(folder / "chain", frames, max(2, frames // 10))
    return {"rmsd": ["run", "rmsd", tpr, h5, "--select", "all"],
            "rdf": ["run", "rdf", tpr, h5, "--select1", "name CA", "--select2", "name OW",
                    "--stop", str(max(4, frames // 5))],
            "rmsf": ["run", "rmsf", tpr, h5, "--select", "all"],
            "xtc": ["run", "rmsd", GRO, *parts, "--select", "name CA"]}


def probe_machine(folder: Path, seconds: float, nbytes: int):
    """``trajscale probe`` on the data's folder: storage, open latency, worker starts."""
    from trajscale.report.probe import ProbeOptions, probe

    return probe(ProbeOptions(path=str(folder), seconds=seconds, nbytes=nbytes), log=lambda s: None)


def matrix(a) -> list[dict]:
    from trajscale.report.machine import this_machine
    from trajscale.report.predict import fit, predict_model
    from trajscale.report.timing import RunReport

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        loads = {name: args for name, args in workloads(folder, a.frames).items() if name in a.workloads}
        machine = probe_machine(folder, a.probe_seconds, a.probe_bytes)
        # The data was just written and read: it is in the page cache, and the serial report's read rate is
        # the cache's. The probe's cold curve would cap those reads at the disk's rate, so it is left out.
        machine = replace(machine, read_curve=())
        if not a.no_calibration:   # the calibration set: trajscale probe --launch's synthetic system
            from trajscale.report.calibrate import calibrate_launch

            execs = [e for e in a.executors if e != "mpi" or mpiexec()]
            machine = calibrate_launch(folder, machine, execs, a.calibration_repeat, log=lambda s: None)
        if a.profile:
            machine.write(a.profile, overwrite=a.overwrite)
        print(machine.format_assumptions())
        here = this_machine()
        for name, args in loads.items():
            out = folder / f"{name}.h5"
            whole_run([*args, "--stop", "3", "--out", str(out), "--overwrite", "-q"]
                      if name != "rdf" else [*args[:-2], "--stop", "3", "--out", str(out), "--overwrite", "-q"])
            rep = folder / f"{name}-serial.json"
            t1 = whole_run([*args, "--report", str(rep), "--overwrite", "--out", str(out), "-q"])
            serial = RunReport.load(rep)
            for ex in a.executors:
                if ex == "mpi" and not mpiexec():
                    continue
                model = fit(serial, ex, ran_on=here)
                preds = predict_model(model, a.ns, machine)
                for p in preds:
                    meas = whole_run([*args, "--out", str(out), "--overwrite", "-q"], ex, p.n)
                    row = {"workload": name, "executor": ex, "n": p.n, "serial": t1, "predicted": p.t_wall,
                           "low": p.t_low, "high": p.t_high, "measured": meas, "error": p.t_wall / meas - 1,
                           "limit": p.limit}
                    rows.append(row)
                    print(f"{name:>5} {ex:>9} {p.n:>3} {t1:>8.2f} {p.t_wall:>9.2f} {p.t_low:>6.2f}-{p.t_high:<6.2f} "
                          f"{meas:>9.2f} {row['error']:>+7.1%}  {p.limit}", flush=True)
    return rows


def probe_check(a) -> int:
    """The probe's one-reader cold rate against ``dd iflag=direct`` and fio (if installed) on one file,
    interleaved ``--repeat`` times (the storage may be shared: each round's three readers run back to back)."""
    from trajscale.report.probe import BLOCK_BYTES, ProbeOptions, probe

    with tempfile.TemporaryDirectory(dir=a.keep) as tmp:
        path = Path(tmp) / "probe-check.bin"
        subprocess.run(["dd", "if=/dev/urandom", f"of={path}", "bs=4M", f"count={a.probe_bytes // BLOCK_BYTES}",
                        "conv=fsync", "status=none"], check=True)
        size = path.stat().st_size
        print("| round | trajscale probe, 1 reader (GB/s) | dd bs=4M iflag=direct | fio bs=4M direct=1 | "
              "probe/dd | probe/fio |\n|---:|---:|---:|---:|---:|---:|")
        ratios = {"dd": [], "fio": []}
        for r in range(a.repeat):
            m = probe(ProbeOptions(path=str(path), seconds=a.probe_seconds, nbytes=size, max_readers=1,
                                   starts=False), log=lambda s: None)
            ours = dict(m.read_curve)[1]
            t0 = time.perf_counter()
            subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=4M", "iflag=direct", "status=none"], check=True)
            dd = size / (time.perf_counter() - t0)
            fio = float("nan")
            if shutil.which("fio"):
                out = subprocess.run(["fio", "--name=r", f"--filename={path}", "--rw=read", "--bs=4M", "--direct=1",
                                      "--output-format=terse", "--terse-version=3"], capture_output=True, text=True,
                                     check=True).stdout
                fio = float(out.split(";")[6]) * 1024   # KiB/s
            ratios["dd"].append(ours / dd)
            ratios["fio"].append(ours / fio)
            print(f"| {r + 1} | {ours / 1e9:.3g} | {dd / 1e9:.3g} | {fio / 1e9:.3g} | {ours / dd:.2f} | "
                  f"{ours / fio:.2f} |", flush=True)
        print(f"file {size / 2**20:.0f} MiB; {m.cold}; median probe/dd {median(ratios['dd']):.2f}, "
              f"probe/fio {median(ratios['fio']):.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--ns", default="2,4,8,16")
    ap.add_argument("--executors", default="processes,mpi,dask")
    ap.add_argument("--workloads", default="rmsd,rdf,rmsf,xtc")
    ap.add_argument("--quick", action="store_true", help="the smallest cell (machinery only): rmsd, processes, N=2")
    ap.add_argument("--probe-check", action="store_true", help="the probe against dd and fio")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of --probe-check")
    ap.add_argument("--probe-seconds", type=float, default=10.0)
    ap.add_argument("--probe-bytes", type=int, default=256 * 2**20)
    ap.add_argument("--seeds", action="store_true", help="the seeds' machines as profiles (docs/scaling.md)")
    ap.add_argument("--keep", default=None, help="folder for the data (default: a temporary one)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --json/--profile file")
    ap.add_argument("--no-calibration", action="store_true",
                    help="predict from the probe's worker starts alone (no calibration set)")
    ap.add_argument("--calibration-repeat", type=int, default=3, help="whole runs per calibration point")
    ap.add_argument("--profile", default=None,
                    help="also write the calibrated machine profile here (for `trajscale report --predict --machine`)")
    a = ap.parse_args(argv)
    for path in (a.json, a.profile):   # refused before the measurements, not after them
        if path:
            check_script_output(PROG, path, a.overwrite)
    if a.seeds:
        from seed_profiles import seed_tables

        print(seed_tables())
        return 0
    if a.probe_check:
        return probe_check(a)
    a.ns = [int(x) for x in a.ns.split(",")]
    a.executors = a.executors.split(",")
    a.workloads = a.workloads.split(",")
    if a.quick:
        a.frames, a.ns, a.executors, a.workloads = 20, [2], ["processes"], ["rmsd"]
        a.probe_seconds, a.probe_bytes, a.calibration_repeat = 2.0, 16 * 2**20, 1
    print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(f"{'work':>5} {'executor':>9} {'N':>3} {'serial s':>8} {'predicted':>9} {'range':>13} {'measured':>9} "
          f"{'error':>7}  limit")
    rows = matrix(a)
    errs = [abs(r["error"]) for r in rows]
    print(f"load average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(f"cells {len(rows)}: median |error| {median(errs):.1%} (target {TARGET_MEDIAN:.0%}), "
          f"max |error| {max(errs):.1%} (target {TARGET_MAX:.0%})")
    for ex in a.executors:
        e = [abs(r["error"]) for r in rows if r["executor"] == ex]
        if e:
            print(f"  {ex}: median {median(e):.1%}, max {max(e):.1%}")
    inside = sum(r["low"] <= r["measured"] <= r["high"] for r in rows)
    print(f"measured inside the predicted range: {inside} of {len(rows)}")
    if a.json:
        write_script_json(PROG, a.json, rows, a.overwrite)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
