"""Each executor's launch line, calibrated on whole runs of a synthetic system (``trajscale probe --launch``).

Starting N workers costs what the machine, the executor and each worker's files make it, not the analysis, so it is
measured once per machine by whole ``trajscale run`` processes at N = cores and :data:`BEYOND` x cores.  Each
further worker's cost is its CPU seconds (far steadier than wall time on a shared machine), except under MPI, whose
ranks poll while they wait: there wall times give the slope.  ``wall_range``: how far the line misses its own runs."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

from ..errors import TrajscaleError
from ..executor_registry import EXECUTORS, executor_traits, names
from ..launch import mpiexec
from .conditions import LoadMeter
from .fit import Model, fit
from .machine import MEASURED, LaunchLine, Machine
from .metrics import worker_timings
from .predict import bytes_moved, n_tasks_at, started_workers, terms_at
from .storage import choose, for_case
from .timing import RunReport

#: The synthetic system: atoms (a small solvated protein: what a worker holds grows with them), frames, XTC parts.
ATOMS, FRAMES, PARTS = 30000, 96, 4
#: The calibration's second point, in workers per core: far enough beyond the cores that each further
#: worker's cost stands out of the runs' noise.
BEYOND = 4
#: Atoms of the small selection: a worker's launch cost is measured at it and at all :data:`ATOMS`.
SMALL = 3000
#: The calibration set's workloads.
H5MD, PARTS_ALL, H5MD_SMALL = "h5md", "xtc parts", "h5md, small selection"
WORKLOADS = (H5MD, PARTS_ALL, H5MD_SMALL)


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def executors_here() -> list[str]:
    """The predicted executors this machine can run (their modules installed; an ``mpiexec`` for MPI)."""
    import importlib.util

    return [name for name in names(predicted=True)
            if all(importlib.util.find_spec(m) for m in EXECUTORS[name].requires)
            and (EXECUTORS[name].workers != "launcher" or mpiexec())]


def timed_run(args: list[str], executor: str = "serial", n: int = 1, timeout: float = 600) -> tuple[float, float]:
    """(wall, CPU) seconds of ``trajscale ARGS`` on ``executor`` x ``n``, of the whole process tree."""
    cmd = [sys.executable, "-m", "trajscale.cli.main", *args, "--executor", executor]
    workers = executor_traits(executor).workers
    if workers == "n_workers":
        cmd += ["-n", str(n)]
    if workers == "launcher":
        cmd = [mpiexec() or "mpiexec", "-n", str(n), *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), check=False, timeout=timeout)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise TrajscaleError(f"calibration run failed ({' '.join(cmd[-8:])}): {last}")
    return dt, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def whole_run(args: list[str], executor: str = "serial", n: int = 1, timeout: float = 600) -> float:
    """Seconds from launching ``trajscale ARGS`` on ``executor`` x ``n`` to its exit, timed from outside."""
    return timed_run(args, executor, n, timeout)[0]


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
    return {H5MD: ["run", "rgyr", str(top), str(h5), "--select", "all"],
            PARTS_ALL: ["run", "rgyr", str(top), *parts, "--select", "all"],
            H5MD_SMALL: ["run", "rgyr", str(top), str(h5), "--select", f"index 0:{SMALL - 1}"]}


@dataclass(frozen=True, slots=True)
class Point:
    """One calibration point: a workload on an executor at N, run ``repeat`` times as a whole process."""

    model: Model
    n: int
    runs: tuple[float, ...]             # whole-run wall seconds, sorted
    cpu: tuple[float, ...]              # their CPU seconds (the process tree's), sorted
    launch: tuple[float, float, float]  # wall seconds beyond the model of the fastest, median and slowest run
    open_s: float = 0.0                 # median over runs of the ranks' median file open (MPI on H5MD)


def _point(args: list[str], ex: str, n: int, model: Model, machine: Machine, repeat: int, tmp: Path) -> Point:
    """Run ``args`` on ``ex`` x ``n``; under MPI on one H5MD file, each run's report gives its ranks' open."""
    rep = tmp / "point.json"
    timed_opens = EXECUTORS[ex].collective_open and model.collective_open
    walls, cpus, opens = [], [], []
    for _ in range(max(1, repeat)):
        extra = ["--report", str(rep), "--overwrite"] if timed_opens else []
        wall, cpu = timed_run([*args, *extra, "-q"], ex, n)
        walls.append(wall)
        cpus.append(cpu)
        if timed_opens:   # (the median rank's open)
            opens.append(median([w.t_init_traj for w in worker_timings(RunReport.load(rep))] or [0.0]))
    walls.sort()
    # what the fastest, median and slowest run took beyond the model's serial phases, work and communication
    t = terms_at(model, n, replace(machine, launch=()))
    launch = tuple(w - (t.total - t.startup) for w in (walls[0], median(walls), walls[-1]))
    return Point(model, n, tuple(walls), tuple(sorted(cpus)), launch, median(opens) if opens else 0.0)


def calibrate_launch(folder: str | os.PathLike, machine: Machine, executors: list[str] | None = None,
                     repeat: int = 1, log=print) -> Machine:
    """``machine`` with each executor's launch line, from ``repeat`` whole runs per point of the set in ``folder``."""
    import tempfile

    executors = executors or executors_here()
    c = machine.cores
    points: dict[tuple[str, str, int], Point] = {}
    # every process a run leaves behind is the calibration's own: other work is the rest of the busy time
    with LoadMeter("launch calibration", adopt=True) as meter, \
            tempfile.TemporaryDirectory(prefix="trajscale-calibration-", dir=folder) as tmp:
        for name, args in write_calibration_set(Path(tmp)).items():
            rep = Path(tmp) / "serial.json"
            whole_run([*args, "--report", str(rep), "--overwrite", "-q"])
            serial = RunReport.load(rep)
            for ex in executors:
                # the calibration's files were just written: its runs read them from the page cache
                model = fit(serial, ex, ran_on=machine)
                model = for_case(model, machine, choose(model, machine).case)
                for n in (c, BEYOND * c):
                    p = points[name, ex, n] = _point(args, ex, n, model, machine, repeat, Path(tmp))
                    log(f"calibration: {name} on {ex} x{n}: {median(p.runs):.3g} s wall, {median(p.cpu):.3g} s CPU, "
                        f"{p.launch[1]:.3g} s of launch" + (f", {p.open_s:.3g} s to open the file" if p.open_s else ""))
    load = meter.result
    lines = [line for ex in executors if (line := _line(ex, points, machine)) is not None]
    if load is not None:
        log(f"calibration: {'BUSY ' if load.busy else ''}{load.describe()}")
    return replace(machine, launch=tuple(lines), loads=(*machine.loads, *((load,) if load else ())),
                   origin=tuple(_origin(machine, load is not None)))


def _workers(at: Point, beyond: Point, machine: Machine) -> tuple[int, int]:
    """Workers started at the two points, the first counted as at least the cores (the line's start)."""
    return max(machine.cores, started_workers(at.model, at.n)), started_workers(at.model, beyond.n)


def _open_rise(at: Point, beyond: Point, machine: Machine) -> float:
    """The rise of the ranks' collective open per further rank over the cores (0 where none was timed)."""
    w_at, w_beyond = _workers(at, beyond, machine)
    further = (w_beyond - w_at) / machine.cores
    return max(0.0, beyond.open_s - at.open_s) / further if further > 0 else 0.0


def _slope(ex: str, at: Point, beyond: Point, machine: Machine) -> tuple[float, float, float] | None:
    """Seconds each further worker adds (fastest, median, slowest runs) beyond the model's terms (MPI: wall seconds)."""
    m = at.model
    w_at, w_beyond = _workers(at, beyond, machine)
    if w_beyond <= w_at:
        return None
    if EXECUTORS[ex].polls_while_waiting:
        further = (w_beyond - w_at) / machine.cores
        opened = _open_rise(at, beyond, machine)
        lo, mid, hi = at.launch
        lo2, mid2, hi2 = beyond.launch
        return tuple(max(0.0, v / further - opened) for v in (lo2 - hi, mid2 - mid, hi2 - lo))
    moved = (bytes_moved(m, beyond.n, n_tasks_at(m, beyond.n)) - bytes_moved(m, at.n, n_tasks_at(m, at.n))) \
        * machine.transfer_s
    further = w_beyond - w_at
    lo, mid, hi = at.cpu[0], median(at.cpu), at.cpu[-1]
    lo2, mid2, hi2 = beyond.cpu[0], median(beyond.cpu), beyond.cpu[-1]
    return tuple(max(0.0, (v - moved) / further) for v in (lo2 - hi, mid2 - mid, hi2 - lo))


def _collective(ex: str, points: dict, machine: Machine) -> float:
    """The rise of the ranks' collective open for an executor that opens collectively (MPI); else 0."""
    if not EXECUTORS[ex].collective_open:
        return 0.0
    c = machine.cores
    at, beyond = points.get((H5MD, ex, c)), points.get((H5MD, ex, BEYOND * c))
    return 0.0 if at is None or beyond is None else _open_rise(at, beyond, machine)


def _line(ex: str, points: dict, machine: Machine) -> LaunchLine | None:
    """The launch line of ``ex``, with the spread of its runs and its misses of them."""
    c = machine.cores
    slopes = {w: s for w in WORKLOADS if (w, ex, c) in points
              and (s := _slope(ex, points[w, ex, c], points[w, ex, BEYOND * c], machine)) is not None}
    if H5MD not in slopes and PARTS_ALL not in slopes:
        return None
    at_cores = max(0.0, median(points[w, ex, c].launch[1] for w in slopes))
    h5md = slopes.get(H5MD, slopes.get(PARTS_ALL))
    parts = slopes.get(PARTS_ALL, h5md)
    if EXECUTORS[ex].polls_while_waiting:   # wall seconds: polling hides a per-atom cost; the open is apart
        per_atom, h5md = 0.0, parts
    else:
        small = slopes.get(H5MD_SMALL)
        per_atom = max(0.0, h5md[1] - small[1]) / (ATOMS - SMALL) if small else 0.0
    base, base_parts = (max(0.0, x[1] - per_atom * ATOMS) for x in (h5md, parts))
    mid = max(h5md[1], 1e-12)
    spread = (min(1.0, min(x[0] for x in (h5md, parts)) / mid), max(1.0, max(x[2] for x in (h5md, parts)) / mid))
    line = LaunchLine(ex, at_cores, base, _collective(ex, points, machine), spread,
                      per_atom_s=per_atom, per_worker_parts_s=base_parts)
    # How far the line misses its own runs (every workload, both N): the model's error, for the range.
    with_line = replace(machine, launch=(line,))
    ratios = [t / terms_at(p.model, p.n, with_line).total for (_, e, _), p in points.items()
              if e == ex for t in (p.runs[0], p.runs[-1])]
    return replace(line, wall_range=(min(1.0, min(ratios)), max(1.0, max(ratios))))


def _origin(machine: Machine, load: bool):
    """``machine``'s origins with where its launch lines (and the load beside them) came from."""
    c = machine.cores
    origin = dict(machine.origin)
    if load:
        origin["loads"] = f"{MEASURED} by trajscale probe on {machine.name}"
    origin["launch"] = (f"{MEASURED}: calibrated on whole runs of a synthetic {ATOMS}-atom system (all atoms "
                        f"and {SMALL} selected) at "
                        f"N = {c}, {BEYOND * c} (trajscale probe --launch)")
    return origin.items()


__all__ = ["ATOMS", "FRAMES", "PARTS", "SMALL", "timed_run", "calibrate_launch", "executors_here", "whole_run",
           "write_calibration_set"]
