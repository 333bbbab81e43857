"""Whole processes timed from outside: the ``trajscale`` CLI against the same CA RMSD as an MDAnalysis script.

Each side is one new process, timed from before it starts until it is reaped, and the sides of a row
run in turn, so that a drift in the machine's speed falls on both; a row's ratio is the median over
its pairs.  trajscale's on-disk cache points at a folder of the benchmark's own: empty for every run of
a "first run" row, filled for the others.  Used by ``trajscale demo`` and ``benchmarks/cold.py``."""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .launch import mpiexec

log = logging.getLogger(__name__)

#: The MDAnalysis side: what a user writes for the same RMSD (``Universe`` + ``rms.RMSD``), results saved.
MDA_SCRIPT = '''\
import sys
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import MDAnalysis as mda
from MDAnalysis.analysis import rms


def main(top, select, out, n_workers, traj):
    r = rms.RMSD(mda.Universe(top, traj if len(traj) > 1 else traj[0]), select=select)
    if n_workers > 1:
        r.run(backend="multiprocessing", n_workers=n_workers)
    else:
        r.run()
    np.savetxt(out, r.results.rmsd[:, 2], fmt="%.8f")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:])
'''

#: Environment variables naming the caches a first run after an install finds empty.
CACHE_VARIABLES = ("TRAJSCALE_CACHE_DIR",)


@dataclass
class Side:
    """One whole-process command and the RMSD file it writes."""

    cmd: list[str]
    out: str
    fresh_caches: bool = False   # every run starts with trajscale's caches empty
    times: list[float] = field(default_factory=list)   # wall seconds of each counted run
    cpu: list[float] = field(default_factory=list)     # user + system seconds, the process and its reaped children


@dataclass
class Row:
    """A paired comparison: ``trajscale`` and ``mdanalysis`` run in turn, ``pairs`` times."""

    label: str
    trajscale: Side
    mdanalysis: Side

    @property
    def ratios(self) -> list[float]:
        return [m / t for t, m in zip(self.trajscale.times, self.mdanalysis.times, strict=False)]

    @property
    def ratio(self) -> float:
        """MDAnalysis time / trajscale time: the median of the pairs' ratios."""
        return statistics.median(self.ratios)

    @property
    def cpu_ratio(self) -> float:
        """MDAnalysis / trajscale CPU seconds, median of the pairs (steadier than wall, blind to parallelism)."""
        return statistics.median(m / t for t, m in zip(self.trajscale.cpu, self.mdanalysis.cpu, strict=False))


def trajscale_command() -> list[str]:
    """The ``trajscale`` console script of this interpreter's environment (``python -m`` where none)."""
    exe = Path(sys.executable).with_name("trajscale")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("trajscale")
    return [found] if found else [sys.executable, "-m", "trajscale.cli.main"]


class Pairs:
    """Builds the rows' commands in ``workdir`` and runs them in pairs.

    Parameters
    ----------
    workdir
        Folder for the MDAnalysis script, the RMSD files, the runs' output and the caches.
    topology, trajectory, select
        The CA RMSD both sides compute; ``trajectory`` is one file or a list of parts (MDAnalysis
        chains them, trajscale reads them in place).
    """

    def __init__(self, workdir: str | os.PathLike, topology: str, trajectory: str | list[str],
                 select: str = "protein and name CA") -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="whole-runs-", dir=workdir))
        self.topology, self.select = topology, select
        self.trajectory = [str(trajectory)] if isinstance(trajectory, (str, os.PathLike)) else list(trajectory)
        self.script = self.workdir / "mda_rmsd.py"
        self.script.write_text(MDA_SCRIPT)
        self.warm_caches = self.workdir / "caches"   # filled by the first runs, then reused
        self.log = self.workdir / "output.log"
        self.rows: list[Row] = []
        self._n_out = 0

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Pairs:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _out(self, name: str) -> str:
        """A file name no other side writes (each row's RMSDs are checked on their own)."""
        self._n_out += 1
        return str(self.workdir / f"{self._n_out}-{name}")

    def trajscale(self, executor: str = "serial", n_workers: int | None = None, mpi_ranks: int | None = None,
                  fresh_caches: bool = False) -> Side:
        """``trajscale -q run rmsd TOP TRAJ --select SEL --executor E [-n N] --out CSV`` (under mpiexec)."""
        out = self._out(f"trajscale-{executor}-{n_workers or mpi_ranks or 1}-{int(fresh_caches)}.csv")
        cmd = [*trajscale_command(), "-q", "run", "rmsd", self.topology, *self.trajectory, "--select", self.select,
               "--executor", executor, "--out", out]
        if n_workers:
            cmd += ["-n", str(n_workers)]
        if mpi_ranks:
            launcher = mpiexec()
            if launcher is None:
                raise FileNotFoundError("no mpiexec on PATH")
            cmd = [launcher, "-n", str(mpi_ranks), *cmd]
        return Side(cmd, out, fresh_caches)

    def mdanalysis(self, n_workers: int = 1) -> Side:
        """``python mda_rmsd.py TOP SEL OUT N TRAJ...``: serial, or ``backend="multiprocessing"`` with N workers."""
        out = self._out(f"mdanalysis-{n_workers}.txt")
        return Side([sys.executable, str(self.script), self.topology, self.select, out, str(n_workers),
                     *self.trajectory], out)

    def add(self, label: str, trajscale: Side, mdanalysis: Side) -> Row:
        row = Row(label, trajscale, mdanalysis)
        self.rows.append(row)
        return row

    def _env(self, fresh: bool) -> tuple[dict, str | None]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("TRAJSCALE_TOPOLOGY_CACHE", None)
        if fresh:
            caches = tempfile.mkdtemp(prefix="fresh-caches-", dir=self.workdir)
        else:
            caches = str(self.warm_caches)
        for var in CACHE_VARIABLES:
            env[var] = os.path.join(caches, var.lower())
        return env, caches if fresh else None

    def time(self, side: Side, record: bool = True) -> float:
        """Run ``side`` once as a whole process; its wall seconds. Raises RuntimeError if it fails."""
        if os.path.exists(side.out):
            os.remove(side.out)   # the commands refuse to overwrite nothing; each run writes afresh
        env, fresh = self._env(side.fresh_caches)
        with open(self.log, "ab") as logf:
            logf.write(f"$ {' '.join(side.cmd)}\n".encode())
            logf.flush()
            t0 = time.monotonic()
            proc = subprocess.Popen(side.cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env)
            _, status, usage = os.wait4(proc.pid, 0)   # the OS's own accounting of the finished child
            wall = time.monotonic() - t0
        rc = proc.returncode = os.waitstatus_to_exitcode(status)
        if fresh is not None:
            if self.warm_caches.exists():
                shutil.rmtree(fresh, ignore_errors=True)
            else:
                os.replace(fresh, self.warm_caches)   # a first run's caches become the later runs'
        if rc != 0:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"exit {rc}: {' '.join(side.cmd)}\n{tail}")
        if record:
            side.times.append(wall)
            side.cpu.append(usage.ru_utime + usage.ru_stime)
        return wall

    def run(self, pairs: int = 5, warmup: int = 1, progress=None) -> None:
        """Every row: ``warmup`` uncounted pairs, then ``pairs`` counted ones (caches filled first where needed)."""
        for row in self.rows:
            if progress:
                progress(row.label)
            if not row.trajscale.fresh_caches and not self.warm_caches.exists():
                self.time(Side(row.trajscale.cmd, row.trajscale.out, fresh_caches=True), record=False)
            for i in range(warmup + pairs):
                self.time(row.trajscale, record=i >= warmup)
                self.time(row.mdanalysis, record=i >= warmup)

    def max_difference(self) -> float:
        """Largest |RMSD difference| (A) between any row's two sides, from the files their last runs wrote."""
        worst = 0.0
        for row in self.rows:
            ours = np.genfromtxt(row.trajscale.out, delimiter=",", names=True)["rmsd"]
            theirs = np.loadtxt(row.mdanalysis.out, ndmin=1)
            if ours.shape != theirs.shape:
                return float("inf")
            worst = max(worst, float(np.abs(ours - theirs).max()))
        return worst

    def table(self) -> str:
        """Wall medians of each side, the median ratio and its range, and the CPU ratio; one line per row."""
        w = max([len(r.label) for r in self.rows] + [len("run (whole process)")]) + 2
        header = f"{'run (whole process)':<{w}}{'trajscale s':>12}{'MDAnalysis s':>14}{'ratio':>8}{'range':>14}"
        lines = [header + f"{'cpu ratio':>11}"]
        for r in self.rows:
            lo, hi = min(r.ratios), max(r.ratios)
            lines.append(f"{r.label:<{w}}{statistics.median(r.trajscale.times):>12.2f}"
                         f"{statistics.median(r.mdanalysis.times):>14.2f}{r.ratio:>7.2f}x"
                         f"{f'{lo:.2f}-{hi:.2f}':>14}{r.cpu_ratio:>10.2f}x")
        return "\n".join(lines)
