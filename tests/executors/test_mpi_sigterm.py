"""SIGTERM to every rank of an MPI run (what ``scancel --signal=TERM`` and a time limit send): the run ends as on
the other executors, one line from rank 0, exit status 143 on every rank, no abort.

Each rank runs under a shell that records its own exit status; the signal goes to the ranks' Python processes
themselves (found in /proc by their PMI_RANK), as SLURM signals every task of a step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import kill_and_reap, mpiexec
from tests.executors.mpi_ranks import mpi_ranks

pytest.importorskip("mpi4py")
pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def _ranks(marker: str) -> dict[int, int]:
    """rank -> pid of the Python ranks whose command line holds ``marker``: the Python rank itself
    ("-m trajscale.cli.main" as its own arguments), not the shell around it."""
    return mpi_ranks(lambda cmd: b"trajscale.cli.main" in cmd and any(marker.encode() in c for c in cmd))


def test_sigterm_to_every_rank_ends_the_run_with_143_and_one_line(tmp_path, adk_vacuum, adk_vacuum_h5md):
    out = tmp_path / "rmsd.csv"
    log = tmp_path / "stderr.txt"
    # 20 tasks of one read each (the file's chunks are single frames), each read 0.5 s slower: every rank
    # is inside its 10 tasks for 5 s
    cli = [sys.executable, "-m", "trajscale.cli.main", "-v", "run", "rmsd", adk_vacuum[0], adk_vacuum_h5md,
           "--executor", "mpi", "--tasks", "20", "--out", str(out)]
    shell = " ".join(f"'{a}'" for a in cli) + f"; echo $? > {tmp_path}/rc.$PMI_RANK"
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TRAJSCALE_TEST_SLOW_READ="0.5")
    with open(log, "w") as err:
        proc = subprocess.Popen([mpiexec(), "-n", "2", "sh", "-c", shell], stdout=subprocess.DEVNULL, stderr=err,
                                env=env, start_new_session=True)
    ranks: dict[int, int] = {}
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            ranks = _ranks(str(out))
            if len(ranks) == 2 and "in 20 tasks on mpi x2" in log.read_text():   # (rank 0, as it sends the job)
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(ranks) == 2, log.read_text()[-3000:]
        time.sleep(1.5)   # into the tasks
        for pid in ranks.values():
            os.kill(pid, signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        kill_and_reap(proc, list(ranks.values()))
    err = log.read_text()
    assert [(tmp_path / f"rc.{r}").read_text().strip() for r in (0, 1)] == ["143", "143"], err[-3000:]
    lines = [line for line in err.splitlines() if "terminated" in line or "abort" in line.lower()
             or "failed" in line or "Traceback" in line]
    assert lines == ["trajscale run: terminated by signal 15; no partial output was kept"], err[-3000:]
    assert "BAD TERMINATION" not in err and "MPI_Abort" not in err, err[-3000:]
    assert not out.exists()
