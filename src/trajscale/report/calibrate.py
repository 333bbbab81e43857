"""Each executor's launch line, calibrated on whole runs of a synthetic system (``trajscale probe --launch``).

What starting N workers costs depends on the machine and the executor, not on the analysis, so it is
measured once per machine: a small synthetic system (:data:`ATOMS` atoms, :data:`FRAMES` frames, as one
H5MD file and as :data:`PARTS` XTC parts) is analysed (radius of gyration of every atom) by whole
``trajscale run`` processes, serially with ``--report`` and at N = cores and 2 x cores on each
executor.  The seconds each run took beyond what the model (:mod:`trajscale.report.predict`) gives its
serial phases, work and communication are its launch; at the cores they are the line's
``at_cores_s``, and their rise to 2 x cores over the further workers started is ``per_worker_s``.
Under MPI the ranks' reports give what opening the H5MD file together through MPI-IO took them,
and its rise over the further ranks is ``collective_open_s``.  How far the finished line misses the
calibration's own runs is its ``wall_range``, which a prediction's range takes on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

from ..errors import TrajscaleError
from .fit import Model, fit
from .machine import MEASURED, LaunchLine, Machine
from .predict import started_workers, terms_at
from .timing import RunReport

#: The synthetic system: atoms (a small solvated protein: what a worker holds grows with them), frames, XTC parts.
ATOMS, FRAMES, PARTS = 30000, 96, 4
#: The calibration set's two trajectories.
WORKLOADS = ("h5md", "xtc parts")


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def mpiexec() -> str | None:
    """The MPI launcher, if MPI is installed."""
    return shutil.which("mpiexec.mpich") or shutil.which("mpiexec")


def executors_here() -> list[str]:
    """The executors this machine can run: processes always; Dask and MPI when installed."""
    import importlib.util

    out = ["processes"]
    if mpiexec() and importlib.util.find_spec("mpi4py"):
        out.append("mpi")
    if importlib.util.find_spec("distributed"):
        out.append("dask")
    return out


def whole_run(args: list[str], executor: str = "serial", n: int = 1, timeout: float = 600) -> float:
    """Seconds from launching ``trajscale ARGS`` on ``executor`` x ``n`` to its exit, timed from outside."""
    cmd = [sys.executable, "-m", "trajscale.cli.main", *args, "--executor", executor]
    if executor in ("processes", "dask"):
        cmd += ["-n", str(n)]
    if executor == "mpi":
        cmd = [mpiexec() or "mpiexec", "-n", str(n), *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), check=False, timeout=timeout)
    dt = time.perf_counter() - t0
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise TrajscaleError(f"calibration run failed ({' '.join(cmd[-8:])}): {last}")
    return dt


def write_calibration_set(folder: Path) -> dict[str, list[str]]:
    """Write the synthetic system into ``folder``; its ``trajscale run`` arguments by workload."""
    import MDAnalysis as mda
    import numpy as np
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    folder.mkdir(parents=True, exist_ok=True)
    top = folder / "calibration.gro"
    rng = np.random.default_rng(20261125)
    # A random walk of every atom in a 6 nm box: coordinates as an XTC would hold them (nm).
    steps = rng.normal(0.0, 0.01, size=(FRAMES, ATOMS, 3)).astype(np.float32)
    xyz = (rng.uniform(0.0, 6.0, size=(ATOMS, 3)).astype(np.float32) + np.cumsum(steps, axis=0))
    box = np.diag([6.0, 6.0, 6.0]).astype(np.float32)
    u = mda.Universe.empty(ATOMS, n_residues=ATOMS // 3, atom_resindex=np.arange(ATOMS) // 3, trajectory=True)
    u.add_TopologyAttr("names", ["C"] * ATOMS)
    u.add_TopologyAttr("resnames", ["ALA"] * (ATOMS // 3))
    u.add_TopologyAttr("resids", np.arange(1, ATOMS // 3 + 1))
    u.atoms.positions = xyz[0] * 10
    u.dimensions = [60.0, 60.0, 60.0, 90.0, 90.0, 90.0]
    u.atoms.write(str(top))
    bounds = np.linspace(0, FRAMES, PARTS + 1).round().astype(int)
    parts = []
    for k in range(PARTS):
        name = folder / f"calibration_{k}.xtc"
        with XTCFile(str(name), "w") as w:
            for i in range(bounds[k], bounds[k + 1]):
                w.write(xyz[i], box, i, float(i), 1000.0)
        parts.append(str(name))
    h5 = folder / "calibration.h5md"
    # one frame a chunk: tasks may start at any frame, so at every N each worker started has work
    whole_run(["convert", str(top), *parts, "-o", str(h5), "--chunks", "1", "--overwrite", "-q"])
    analysis = ["rgyr", "--select", "all"]
    return {"h5md": ["run", analysis[0], str(top), str(h5), *analysis[1:]],
            "xtc parts": ["run", analysis[0], str(top), *parts, *analysis[1:]]}


def beyond_the_model(model: Model, n: int, machine: Machine, measured: float) -> float:
    """Seconds a whole run at N took beyond the model's serial phases, work and communication."""
    t = terms_at(model, n, replace(machine, launch=()))
    return measured - (t.total - t.startup)


@dataclass(frozen=True, slots=True)
class Point:
    """One calibration point: a workload on an executor at N, timed ``repeat`` times as a whole run."""

    model: Model
    n: int
    runs: tuple[float, ...]           # whole-run seconds, sorted
    launch: tuple[float, float, float]   # seconds beyond the model of the fastest, median and slowest run
    open_s: float = 0.0               # median over runs of the ranks' median file open (MPI on H5MD)


def _opens(report: Path) -> float:
    """The median rank's file open in an MPI run's report."""
    from .metrics import worker_timings

    opens = [w.t_init_traj for w in worker_timings(RunReport.load(report))]
    return median(opens) if opens else 0.0


def _point(args: list[str], ex: str, n: int, model: Model, machine: Machine, repeat: int, tmp: Path) -> Point:
    """Time ``args`` on ``ex`` x ``n``; under MPI on one H5MD file, each run's report gives its ranks' open."""
    rep = tmp / "point.json"
    timed_opens = ex == "mpi" and model.collective_open
    runs, opens = [], []
    for _ in range(max(1, repeat)):
        extra = ["--report", str(rep), "--overwrite"] if timed_opens else []
        runs.append(whole_run([*args, *extra, "-q"], ex, n))
        if timed_opens:
            opens.append(_opens(rep))
    runs.sort()
    launch = tuple(beyond_the_model(model, n, machine, t) for t in (runs[0], median(runs), runs[-1]))
    return Point(model, n, tuple(runs), launch, median(opens) if opens else 0.0)


def calibrate_launch(folder: str | os.PathLike, machine: Machine, executors: list[str] | None = None,
                     repeat: int = 1, log=print) -> Machine:
    """``machine`` with each executor's launch line, from whole runs of the calibration set in ``folder``.

    Each point is the median of ``repeat`` runs; the line's ``per_worker_range`` spans the slopes
    that the fastest and slowest of those runs, and the two workloads, give, and its ``wall_range``
    how far the line's predictions of its own runs fell from them.  Under MPI the ranks' collective
    open of the H5MD file is read from the runs' reports.  The files are written in a folder of
    their own inside ``folder`` and removed afterwards.
    """
    import tempfile

    executors = executors or executors_here()
    c = machine.cores
    points: dict[tuple[str, str, int], Point] = {}
    with tempfile.TemporaryDirectory(prefix="trajscale-calibration-", dir=folder) as tmp:
        for name, args in write_calibration_set(Path(tmp)).items():
            rep = Path(tmp) / "serial.json"
            whole_run([*args, "--report", str(rep), "--overwrite", "-q"])
            serial = RunReport.load(rep)
            for ex in executors:
                model = fit(serial, ex, ran_on=machine)
                for n in (c, 2 * c):
                    p = points[name, ex, n] = _point(args, ex, n, model, machine, repeat, Path(tmp))
                    log(f"calibration: {name} on {ex} x{n}: {median(p.runs):.3g} s, {p.launch[1]:.3g} s of launch"
                        + (f", {p.open_s:.3g} s to open the file" if p.open_s else ""))
    lines = [line for ex in executors if (line := _line(ex, points, machine)) is not None]
    return replace(machine, launch=tuple(lines), origin=tuple(_origin(machine)))


def _line(ex: str, points: dict, machine: Machine) -> LaunchLine | None:
    """The launch line of ``ex``: the medians, the spread of the runs and workloads, and the line's misses."""
    c = machine.cores
    slopes, collective = {}, 0.0
    for w in WORKLOADS:
        if (w, ex, c) not in points:
            continue
        at, beyond = points[w, ex, c], points[w, ex, 2 * c]
        further = (started_workers(at.model, 2 * c) - max(c, started_workers(at.model, c))) / c
        if further <= 0:
            continue
        lo, mid, hi = at.launch
        lo2, mid2, hi2 = beyond.launch
        opened = max(0.0, beyond.open_s - at.open_s) / further   # the collective open, measured on the ranks
        if opened:
            collective = opened
        slopes[w] = tuple(max(0.0, v / further - opened) for v in (lo2 - hi, mid2 - mid, hi2 - lo))
    if not slopes:
        return None
    at_cores = max(0.0, median(points[w, ex, c].launch[1] for w in slopes))
    per_worker = median(s[1] for s in slopes.values())
    low = min(s[0] for s in slopes.values()) / per_worker if per_worker > 0 else 1.0
    high = max(s[2] for s in slopes.values()) / per_worker if per_worker > 0 else 1.0
    line = LaunchLine(ex, at_cores, per_worker, collective, (min(1.0, low), max(1.0, high)))
    # How far the line misses its own runs (both workloads, both N): the model's error, for the range.
    with_line = replace(machine, launch=(line,))
    ratios = [t / terms_at(p.model, p.n, with_line).total for (w, e, _), p in points.items()
              if e == ex and w in slopes for t in (p.runs[0], p.runs[-1])]
    return replace(line, wall_range=(min(1.0, min(ratios)), max(1.0, max(ratios))))


def _origin(machine: Machine):
    """``machine``'s origins with where its launch lines came from."""
    c = machine.cores
    origin = dict(machine.origin)
    origin["launch"] = (f"{MEASURED}: calibrated on whole runs of a synthetic {ATOMS}-atom system at "
                        f"N = {c}, {2 * c} (trajscale probe --launch)")
    return origin.items()


__all__ = ["ATOMS", "FRAMES", "PARTS", "calibrate_launch", "executors_here", "whole_run",
           "write_calibration_set"]
