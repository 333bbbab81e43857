"""The ``slurm`` fixture: a real one-node SLURM (tests/slurm/cluster.py) for the tests of this folder.

Every test here is marked ``slurm`` (and ``cli``/``slow``/``mpi`` as tests/tiers.py asks): ``pytest -m slurm``
runs the tier, ``-m "not slurm"`` leaves it out. Without root, ``slurm-wlm`` or ``munge`` the tests are
skipped with the reason.

Use::

    def test_x(slurm, tmp_path):
        job = slurm.sbatch("#!/bin/bash\\nsrun --mpi=pmi2 -n 2 trajscale ...\\n", "-n", "2", cwd=tmp_path)
        assert slurm.wait(job) == "COMPLETED", slurm.log(job)
        slurm.run("srun", "-n", "2", "--mpi=pmi2", "trajscale", "inspect", path)   # a CompletedProcess

``slurm.env`` is the environment for anything started against the cluster (``SLURM_CONF``; the venv's
``bin`` first on ``PATH``; no ``SLURM_*``/``PMI_*`` variables of an outer job).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm import cluster

#: Job states after which a job runs no more (REQUEUED is not one: the job runs again).
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE"}


class Slurm:
    """The running cluster and helpers to use it (the ``slurm`` fixture)."""

    def __init__(self, record: dict, workdir: Path):
        self.dir = Path(record["dir"])
        self.conf = record["conf"]
        self.host = record["host"]
        self.cpus = record["cpus"]
        self.workdir = workdir
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "PMI_"))}
        bindir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "/usr/bin:/bin"), "/usr/sbin"])
        env.update(SLURM_CONF=self.conf, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        self.env = env
        self._n = 0

    def run(self, *argv: str, timeout: float = 180, check: bool = False, **kw) -> subprocess.CompletedProcess:
        """Run a command against the cluster (``srun ...``, ``squeue ...``); output captured as text."""
        env = dict(self.env, **kw.pop("env", {}))
        return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=check,
                              **kw)

    def sbatch(self, script: str, *args: str, cwd: str | os.PathLike | None = None, env: dict | None = None) -> int:
        """Submit ``script`` (a batch script's text) with sbatch's ``args``; return the job id. The script is
        written into ``cwd`` (the job's working directory; a fresh folder by default), its output goes to
        ``slurm-JOBID.out`` there unless ``args`` say otherwise (:meth:`log` reads it). The job runs in
        :attr:`env` (sbatch exports the submitter's environment) with ``env`` on top."""
        if cwd is None:
            self._n += 1
            cwd = self.workdir / f"job{self._n}"
            cwd.mkdir()
        self._n += 1
        path = Path(cwd) / f"job{self._n}.sbatch"
        path.write_text(script)
        out = self.run("sbatch", "--parsable", *args, str(path), cwd=cwd, timeout=60, env=env or {})
        if out.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
        return int(out.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """The job's fields as ``scontrol show job`` gives them (JobState, Restarts, ExitCode, StdOut, ...)."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id), timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"scontrol show job {job_id}: {out.stderr.strip()}")
        return dict(re.findall(r"(\w+)=(\S*)", out.stdout))

    def state(self, job_id: int) -> str:
        """The job's state: PENDING, RUNNING, COMPLETED, TIMEOUT, ..."""
        return self.job(job_id)["JobState"]

    def wait(self, job_id: int, timeout: float = 180, states: set[str] = FINISHED) -> str:
        """Wait until the job is in one of ``states`` (by default: it has finished); return the state."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state(job_id)
            if state in states:
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {state} after {timeout:.0f} s; its log:\n{self.log(job_id)}")
            time.sleep(0.2)

    def log(self, job_id: int) -> str:
        """The job's output file (``StdOut``), or a line saying there is none."""
        path = self.job(job_id).get("StdOut", "")
        try:
            return Path(path).read_text(errors="replace")
        except OSError:
            return f"(no output file {path!r})"

    def cancel(self, job_id: int, *args: str) -> None:
        """``scancel ARGS JOBID`` (e.g. ``"--signal=TERM", "--batch"``)."""
        out = self.run("scancel", *args, str(job_id), timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"scancel {' '.join(args)} {job_id}: {out.stderr.strip()}")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A one-node SLURM shared by this machine's test processes (started by the first, stopped by the last)."""
    why = cluster.why_not()
    if why:
        pytest.skip(why)
    record = cluster.acquire()
    try:
        yield Slurm(record, tmp_path_factory.mktemp("slurm"))
    finally:
        cluster.release()
