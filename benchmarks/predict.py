"""Predicted against measured: ``trajscale report --predict`` from a serial report, out of sample.

    python benchmarks/predict.py [--ns 2,4,8,16] [--executors processes,mpi,dask] [--frames 200] [--json OUT]
    python benchmarks/predict.py --quick          # the smallest cell: the machinery, not a measurement
    python benchmarks/predict.py --probe-check    # the probe's cold read rate against dd and fio
    python benchmarks/predict.py --seeds          # the seeds' machines as profiles, against their figures
    python benchmarks/predict.py --held-out [--held-out-frames 2000] [--machine PROFILE.json]
                                                  # workloads outside the matrix, warm and cold

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

The held-out set (``--held-out``) is chosen outside the matrix and the calibration: on a larger store
of AdK in water (``--held-out-frames``, 2,000 frames: 1.1 GB), an RDF of the backbone N atoms against
water O, RMSF of all atoms, native contacts of the CA atoms, and a user function (``held_out_user.py``:
each frame's largest distance from the centroid, all atoms), each run whole as ``trajscale`` (or the
script) with the file in the page cache (warm: read through first) and not (cold: its pages dropped
with ``posix_fadvise(POSIX_FADV_DONTNEED)``, which needs no root and leaves other files' pages alone;
``mincore`` confirms each state before each run).  The machine is the one ``trajscale probe --launch``
measures (a whole process, as a user runs it; ``--machine`` reuses a profile).  Each case's serial
report predicts processes(N) of the same case with ``--storage auto``; the other case's report,
told the case (``--storage``), predicts it too (the "from the other report" columns).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from _script_output import check_script_output, write_script_json  # noqa: E402

from trajscale.launch import mpiexec  # noqa: E402 (after the sys.path line)
from trajscale.report.calibrate import whole_run as run_timed  # noqa: E402

PROG = Path(__file__).name
TARGET_MEDIAN, TARGET_MAX = 0.15, 0.30
HELD_OUT_MEDIAN, HELD_OUT_MAX = 0.20, 0.30


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
    from trajscale.report.predict import fit
    from trajscale.report.storage import predict_storage
    from trajscale.report.timing import RunReport

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        loads = {name: args for name, args in workloads(folder, a.frames).items() if name in a.workloads}
        # The data was just written and read: it is in the page cache, and every run finds it there. The
        # prediction's storage case is chosen from the serial report's own record of it (--storage auto).
        machine = probe_machine(folder, a.probe_seconds, a.probe_bytes)
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
                preds = predict_storage(model, a.ns, machine).preds
                for p in preds:
                    meas = whole_run([*args, "--out", str(out), "--overwrite", "-q"], ex, p.n)
                    row = {"workload": name, "executor": ex, "n": p.n, "serial": t1, "predicted": p.t_wall,
                           "low": p.t_low, "high": p.t_high, "measured": meas, "error": p.t_wall / meas - 1,
                           "limit": p.limit}
                    rows.append(row)
                    print(f"{name:>5} {ex:>9} {p.n:>3} {t1:>8.2f} {p.t_wall:>9.2f} {p.t_low:>6.2f}-{p.t_high:<6.2f} "
                          f"{meas:>9.2f} {row['error']:>+7.1%}  {p.limit}", flush=True)
    return rows


HELD_OUT = ("rdf", "rmsf", "contacts", "user")


def held_out_workloads(folder: Path, frames: int) -> tuple[str, dict[str, list[str]]]:
    """The held-out store, and name -> the command of a whole serial run of each workload (no executor)."""
    from trajscale.demo import build_demo_file

    tpr, h5 = build_demo_file(folder / "held-out", frames, progress=False)
    cli = [sys.executable, "-m", "trajscale.cli.main", "run"]
    return h5, {"rdf": [*cli, "rdf", tpr, h5, "--select1", "protein and name N", "--select2", "name OW",
                        "--stop", str(max(4, frames // 20))],
                "rmsf": [*cli, "rmsf", tpr, h5, "--select", "all"],
                "contacts": [*cli, "contacts", tpr, h5, "--select1", "name CA", "--select2", "name CA",
                             "--radius", "8"],
                "user": [sys.executable, str(HERE / "held_out_user.py"), tpr, h5]}


def timed(cmd: list[str]) -> float:
    """Seconds from launching ``cmd`` to its exit (it must succeed)."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    dt = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{PROG}: {' '.join(cmd[-6:])} failed: {proc.stderr.strip()[-500:]}")
    return dt


def set_cache(path: str, case: str) -> float:
    """Put ``path`` in the page cache (read it through) or out of it (POSIX_FADV_DONTNEED); the share of
    its pages resident afterwards, as ``mincore`` tells."""
    from trajscale.report.conditions import page_cache

    fd = os.open(path, os.O_RDONLY)
    try:
        if case == "cold":
            os.fsync(fd)   # clean pages only are dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        else:
            while os.read(fd, 16 << 20):
                pass
    finally:
        os.close(fd)
    return page_cache([path]).resident


def held_out_machine(a, folder: Path):
    """The profile of ``--machine``, else ``trajscale probe --launch`` on the data's folder, as a whole process."""
    from trajscale.report.machine import Machine

    if a.machine:
        return Machine.load(a.machine)
    prof = folder / "held-out-profile.json"   # beside the data's folder: the probe refuses to write into it
    cmd = [sys.executable, "-m", "trajscale.cli.main", "probe", str(folder / "held-out"),
           "--seconds", str(a.probe_seconds),
           "--bytes", str(a.probe_bytes), "--out", str(prof), "--overwrite"]
    timed(cmd + ([] if a.no_calibration else ["--launch", "--repeat", str(a.calibration_repeat)]))
    if a.profile:
        shutil.copyfile(prof, a.profile)
    return Machine.load(prof)


def serial_report(cmd: list[str], rep: Path, h5: str, case: str, repeat: int) -> float:
    """``repeat`` serial runs of ``cmd`` in storage case ``case``; the report of the median run is kept at
    ``rep`` (a prediction is only as steady as the one report it starts from). Returns its wall time."""
    runs = []
    for i in range(repeat):
        set_cache(h5, case)
        out = rep.with_suffix(f".{i}.json")
        runs.append((timed([*cmd, "--executor", "serial", "--report", str(out), "--overwrite", "-q"]), out))
    wall, keep = sorted(runs)[len(runs) // 2]
    shutil.copyfile(keep, rep)
    return wall


def held_out(a) -> list[dict]:
    """The held-out set (module docstring): each workload's warm and cold serial reports, and processes(N)."""
    from trajscale.report.fit import fit
    from trajscale.report.machine import this_machine
    from trajscale.report.storage import predict_storage
    from trajscale.report.timing import RunReport

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        h5, loads = held_out_workloads(folder, a.held_out_frames)
        machine = held_out_machine(a, folder)
        print(machine.format_assumptions())
        here = this_machine()
        for name in a.workloads:
            cmd, fits = loads[name], {}
            # not counted: a topology's first run parses it with MDAnalysis and fills the selection cache,
            # which every later run (serial and parallel alike) reads instead
            timed([*cmd, "--executor", "serial", "-q"])
            for case in ("cached", "cold"):
                rep = folder / f"held-out-{name}-{case}.json"
                serial = serial_report(cmd, rep, h5, case, a.held_out_repeat)
                fits[case] = (fit(RunReport.load(rep), "processes", ran_on=here), serial)
            for case, other in (("cached", "cold"), ("cold", "cached")):
                model, serial = fits[case]
                got = predict_storage(model, a.ns, machine, "auto")
                cross = predict_storage(fits[other][0], a.ns, machine, case)
                for p, x in zip(got.preds, cross.preds, strict=True):
                    runs = []
                    for _ in range(a.held_out_repeat):
                        resident = set_cache(h5, case)
                        runs.append(timed([*cmd, "--executor", "processes", "-n", str(p.n), "-q"]))
                    meas = median(runs)
                    rows.append({"workload": name, "case": case, "n": p.n, "serial": serial,
                                 "chosen": got.storage.case, "predicted": p.t_wall, "low": p.t_low,
                                 "high": p.t_high, "measured": meas, "error": p.t_wall / meas - 1,
                                 "other_report": x.t_wall, "other_error": x.t_wall / meas - 1,
                                 "resident": resident, "limit": p.limit, "report_busy": bool(model.busy)})
                    r = rows[-1]
                    print(f"{name:>8} {case:>6} {p.n:>3} {serial:>8.2f} {r['chosen']:>6} {p.t_wall:>9.2f} "
                          f"{meas:>9.2f} {r['error']:>+7.1%} {x.t_wall:>9.2f} {r['other_error']:>+7.1%} "
                          f"{resident:>5.0%}  {p.limit}", flush=True)
        print(f"profile measured on a busy machine: {machine.busy or 'no'}")
    return rows


def run_held_out(a) -> int:
    """``--held-out``: the table, the summary and the JSON."""
    print(f"{'work':>8} {'case':>6} {'N':>3} {'serial s':>8} {'auto':>6} {'predicted':>9} {'measured':>9} "
          f"{'error':>7} {'predicted':>9} {'error':>7} {'cache':>5}  limit")
    rows = held_out(a)
    print(f"load average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    held_out_summary(rows)
    if a.json:
        write_script_json(PROG, a.json, rows, a.overwrite)
    return 0


def held_out_summary(rows: list[dict]) -> None:
    print(f"{'':>8} {'':>6} {'':>3} {'':>8} {'':>6} {'':>9} {'':>9} {'':>7} {'(other report)':>17}")
    for case in ("cached", "cold"):
        for key in ("error", "other_error"):
            e = [abs(r[key]) for r in rows if r["case"] == case]
            if e:
                print(f"{case} ({'its own report' if key == 'error' else 'the other report'}): median |error| "
                      f"{median(e):.1%}, max {max(e):.1%} (targets {HELD_OUT_MEDIAN:.0%}, {HELD_OUT_MAX:.0%})")
    print(f"reports measured on a busy machine: {sum(r['report_busy'] for r in rows)} of {len(rows)} cells")


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


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--ns", default=None, help="default: 2,4,8,16 (with --held-out: 2,16)")
    ap.add_argument("--executors", default="processes,mpi,dask")
    ap.add_argument("--workloads", default=None, help="default: rmsd,rdf,rmsf,xtc (with --held-out: "
                                                        f"{','.join(HELD_OUT)})")
    ap.add_argument("--held-out", action="store_true", help="the held-out set, warm and cold (module docstring)")
    ap.add_argument("--held-out-frames", type=int, default=2000)
    ap.add_argument("--held-out-repeat", type=int, default=3,
                    help="whole runs per held-out cell and per serial report (the median)")
    ap.add_argument("--machine", default=None, help="with --held-out: a profile to use instead of probing")
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
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    for path in (a.json, a.profile):   # refused before the measurements, not after them
        if path:
            check_script_output(PROG, path, a.overwrite)
    if a.seeds:
        from seed_profiles import seed_tables

        print(seed_tables())
        return 0
    if a.probe_check:
        return probe_check(a)
    a.ns = [int(x) for x in (a.ns or ("2,16" if a.held_out else "2,4,8,16")).split(",")]
    a.executors = a.executors.split(",")
    a.workloads = (a.workloads or (",".join(HELD_OUT) if a.held_out else "rmsd,rdf,rmsf,xtc")).split(",")
    if a.quick:
        a.frames, a.ns, a.executors, a.workloads = 20, [2], ["processes"], ["rmsf" if a.held_out else "rmsd"]
        a.probe_seconds, a.probe_bytes, a.calibration_repeat = 2.0, 16 * 2**20, 1
        a.held_out_frames, a.held_out_repeat, a.no_calibration = 20, 1, a.no_calibration or a.held_out
    print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    if a.held_out:
        return run_held_out(a)
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
