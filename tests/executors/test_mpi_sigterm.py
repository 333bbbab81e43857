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


def test_sigterm_to_every_rank_ends_the_run_with_143_and_one_line(tmp_path, adk_water):
    """The signal lands inside each rank's one long task: the ranks leave it between blocks, not at its end."""
    out = tmp_path / "rdf.csv"
    log = tmp_path / "stderr.txt"
    # An RDF of every atom pair of AdK in water (47,681 atoms) declares ~10^8 pairs a frame: a block is one
    # frame, a rank's one task is 5 blocks, each read made 3 s slower: 15 s, and the ranks end within a block
    cli = [sys.executable, "-m", "trajscale.cli.main", "-v", "run", "rdf", adk_water["tpr"], adk_water["xtc"],
           "--select1", "all", "--select2", "all", "--executor", "mpi", "--tasks", "2", "--out", str(out)]
    shell = " ".join(f"'{a}'" for a in cli) + f"; echo $? > {tmp_path}/rc.$PMI_RANK"
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TRAJSCALE_TEST_SLOW_READ="3.0")
    with open(log, "w") as err:
        proc = subprocess.Popen([mpiexec(), "-n", "2", "sh", "-c", shell], stdout=subprocess.DEVNULL, stderr=err,
                                env=env, start_new_session=True)
    ranks: dict[int, int] = {}
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            ranks = _ranks(str(out))
            if len(ranks) == 2 and "in 2 tasks on mpi x2" in log.read_text():   # (rank 0, as it sends the job)
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(ranks) == 2, log.read_text()[-3000:]
        time.sleep(2.0)   # into the tasks' first block
        for pid in ranks.values():
            os.kill(pid, signal.SIGTERM)
        signalled = time.monotonic()
        proc.wait(timeout=120)
        took = time.monotonic() - signalled
    finally:
        kill_and_reap(proc, list(ranks.values()))
    assert took < 12, f"the ranks ended {took:.1f} s after the signal: their tasks ran to the end"
    err = log.read_text()
    assert [(tmp_path / f"rc.{r}").read_text().strip() for r in (0, 1)] == ["143", "143"], err[-3000:]
    lines = [line for line in err.splitlines() if "terminated" in line or "abort" in line.lower()
             or "failed" in line or "Traceback" in line]
    assert lines == ["trajscale run: terminated by signal 15; no partial output was kept"], err[-3000:]
    assert "BAD TERMINATION" not in err and "MPI_Abort" not in err, err[-3000:]
    assert not out.exists()
