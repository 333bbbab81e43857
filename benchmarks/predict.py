"""Predicted vs measured: ``trajscale report --predict`` checked against real runs, and the seeds' curves.

    python benchmarks/predict.py [--frames 150] [--smoke] [--repeat 1] [--keep DIR]
    python benchmarks/predict.py --seeds

Default mode: builds (or reuses) an AdK-in-water H5MD file of 300 frames (47,681 atoms),
and analyses its first ``--frames`` frames (``--smoke``: 10) with ``trajscale run rdf
--select1 "name CA" --select2 "name OW"`` (about 50 ms a frame: the tasks, not the
interpreter's start, dominate the wall time).  A 3-frame run warms the page cache and the
topology cache, then a serial run with ``--report``, then a
``processes -n 2`` run, each a whole ``trajscale`` process timed from outside (launch to
exit).  The serial report's prediction for processes(2) (``report --predict 2 --as
processes``) is printed beside the measured whole-process wall time.

``--seeds``: synthetic serial reports built from the parameters seeds 000 and 001 publish
(frames, bytes, per-frame read and compute times, the tuned serial time), and the model's
prediction at their core counts, beside the published figures (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trajscale.util import check_script_output, write_script_json

PROG = Path(__file__).name

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))


def whole_run(args: list[str], env: dict | None = None) -> float:
    """Seconds from launching ``trajscale ARGS`` to its exit (the whole process, from outside)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "trajscale.cli.main", *args], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})), check=False)
    dt = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"trajscale {' '.join(args)} failed:\n{proc.stderr}")
    return dt


def ANALYSIS(tpr: str, h5: str, frames: int) -> list[str]:
    return ["run", "rdf", tpr, h5, "--select1", "name CA", "--select2", "name OW", "--stop", str(frames)]


def free_cores(n: int = 2, seconds: float = 1.0) -> int:
    """Cores ``n`` busy processes get on this machine now: their CPU seconds over the wall (1 or more)."""
    code = (f"import time\nt = time.perf_counter() + {seconds!r}\nwhile time.perf_counter() < t: pass\n"
            "print(time.process_time())")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    return max(1, round(sum(float(p.communicate()[0]) for p in procs) / seconds))


def predict_vs_measured(h5: str, tpr: str, folder: Path, frames: int, n: int = 2) -> dict:
    """One serial run with a report, its prediction for processes(n) on the cores n busy processes get
    now (measured before and after), and the measured processes(n) run."""
    from trajscale.report.predict import Machine, fit, predict_model
    from trajscale.report.timing import RunReport

    base = ANALYSIS(tpr, h5, frames)
    rep = folder / "serial.json"
    for f in (rep, folder / "s.h5", folder / "p.h5"):
        f.unlink(missing_ok=True)
    before = free_cores(n)
    t_serial = whole_run([*base, "--executor", "serial", "--report", str(rep), "--out", str(folder / "s.h5")])
    t_par = whole_run([*base, "--executor", "processes", "-n", str(n), "--out", str(folder / "p.h5")])
    after = free_cores(n)
    model = fit(RunReport.load(rep), "processes")
    pred = predict_model(model, [1, n], Machine(cores_per_node=before))
    return {"serial_measured": t_serial, "serial_model": pred[0].t_wall, "n": n, "predicted": pred[1].t_wall,
            "measured": t_par, "error": pred[1].t_wall / t_par - 1, "limit": pred[1].limit,
            "cores_before": before, "cores_after": after}


# -- the seeds' runs, from the parameters they publish ------------------------------------------

def synthetic_report(frames: int, nbytes: int, t_io: float, t_compute: float, fixed: float, n_atoms: int,
                     chunk_frames: int = 1):
    """A serial RunReport of one task with the given totals (seconds) and ``fixed`` seconds of topology."""
    from trajscale.report.timing import RunReport, TaskTiming, summarize_workers

    task = TaskTiming(task=0, start=0, stop=frames, worker="serial", t_io=t_io, t_compute=t_compute,
                      bytes_read=nbytes)
    extras = {"serial": {"t_init_top": fixed, "t_start": 0.0}}
    phases = dict.fromkeys(("imports", "mpi_init", "topology", "prepare", "pool_start", "tasks", "reduce", "write"),
                           0.0)
    phases.update(topology=fixed, tasks=t_io + t_compute)
    return RunReport(analysis="rmsd", executor="serial", n_workers=1, n_frames=frames, n_atoms=n_atoms,
                     source={"format": "h5md", "path": "seed.h5md", "chunks": [chunk_frames, n_atoms, 3]},
                     t_total=fixed + t_io + t_compute, tasks=[task], workers=summarize_workers([task], extras),
                     meta={"n_tasks": 1, "n_tasks_asked": None},
                     process={"t_wall": sum(phases.values()), "phases": phases, "origin": "process start"})


#: Seed 000 (Jakupovic & Beckstein, SciPy 2021): YiiP, 90,100 frames, 113 GiB, RMSD of the CA atoms,
#: ASU Agave (28 cores/node, BeeGFS).  Baseline serial 4,623 s; the re-laid-out file's serial I/O about
#: 10x faster (~460 s); 47 s at 112 cores (98x the baseline; I/O 83 s for the chunked file at 4 nodes).
SEED_000 = {"frames": 90_100, "nbytes": 113 * 2**30, "t_io": 4623 / 10, "t_compute": 0.0002 * 90_100,
            "fixed": 1.0, "n_atoms": 214, "ns": [1, 28, 56, 112], "nodes": 4, "cores": 28,
            "published": {1: 4623 / 10, 112: 47.0}, "storage_gbps": 113 * 2**30 / 1e9 / 47.0}
#: Seed 001 (Khoshlessan et al. 2020): AdK core CA (146 atoms), 2,512,200 frames, 0.09 ms compute and
#: 0.3 ms read per frame serially, SDSC Comet (24 cores/node, Lustre); MPI-IO HDF5 near ideal, ~300x on 384.
SEED_001 = {"frames": 2_512_200, "nbytes": 2_512_200 * 146 * 12, "t_io": 2_512_200 * 0.3e-3,
            "t_compute": 2_512_200 * 0.09e-3, "fixed": 0.3, "n_atoms": 146, "ns": [1, 24, 48, 96, 192, 384],
            "nodes": 16, "cores": 24, "published": {384: 300.0}, "metadata_ms": 1.0}


def seed_tables() -> str:
    from trajscale.report.predict import Machine, efficiency_threshold, fit, predict_model

    out = []
    cases = (("seed 000 (tuned YiiP run, Agave)", SEED_000), ("seed 001 (MPI-IO HDF5, Comet)", SEED_001),
             ("seed 001, opens served at 20 ms each (its stragglers' cause)", {**SEED_001, "metadata_ms": 20.0,
                                                                              "published": {}}))
    for name, p in cases:
        rep = synthetic_report(p["frames"], p["nbytes"], p["t_io"], p["t_compute"], p["fixed"], p["n_atoms"])
        machine = Machine(p.get("storage_gbps"), p.get("metadata_ms"), p["nodes"], p["cores"])
        model = fit(rep, "mpi")
        preds = predict_model(model, p["ns"], machine)
        out.append(f"{name}: storage {machine.storage_gbps or 'unbounded'} GB/s, metadata "
                   f"{machine.metadata_ms or 'local'} ms/open, {p['nodes']} x {p['cores']} cores")
        out.append("| N | predicted wall (s) | S(N) | E(N) | limit | published |")
        out.append("|---:|---:|---:|---:|---|---|")
        for q in preds:
            pub = p["published"].get(q.n)
            pub_s = "" if pub is None else (f"{pub:.0f} s" if name.startswith("seed 000") else f"S = {pub:.0f}x")
            out.append(f"| {q.n} | {q.t_wall:.4g} | {q.speedup:.3g} | {q.efficiency:.2f} | {q.limit} | {pub_s} |")
        out.append(f"E(N) < 0.7 from N = {efficiency_threshold(model, machine)}\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--smoke", action="store_true", help="10 frames: checks that it runs, not a measurement")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--keep", default=None, help="folder for the trajectory (default: a temporary one)")
    ap.add_argument("--seeds", action="store_true", help="the seeds' curves from their published parameters")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    a = ap.parse_args(argv)
    if a.json:   # refused before the measurements, not after them
        check_script_output(PROG, a.json, a.overwrite)
    if a.seeds:
        print(seed_tables())
        return 0
    from trajscale.demo import build_demo_file

    frames = 10 if a.smoke else a.frames
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        tpr, h5 = build_demo_file(folder, 300, progress=False)
        whole_run(ANALYSIS(tpr, h5, 3))   # warm: page cache, topology cache
        rows = [predict_vs_measured(h5, tpr, folder, frames) for _ in range(a.repeat)]
    print(f"{frames} frames x 47,681 atoms, rdf CA-OW; whole processes timed from outside")
    print(f"{'cores':>6} {'serial s':>9} {'model(1)':>9} {'pred(2)':>8} {'meas(2)':>8} {'error':>7}  limit")
    for r in rows:
        print(f"{r['cores_before']:>3}/{r['cores_after']:<2} {r['serial_measured']:>9.3f} {r['serial_model']:>9.3f} "
              f"{r['predicted']:>8.3f} {r['measured']:>8.3f} {r['error']:>+7.1%}  {r['limit']}")
    if a.json:
        write_script_json(PROG, a.json, rows, a.overwrite)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
