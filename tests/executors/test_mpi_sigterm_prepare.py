"""A stop signal while rank 0 prepares, the other ranks already waiting in its share: every rank ends as an
interrupted command (143 for SIGTERM, 130 for Ctrl-C), one line from rank 0, no abort, no hang.

Rank 0's slowness is the test's own (``slow_prepare_cli.py`` wraps trajscale's functions in the ranks' processes);
the signal goes to every rank's Python process, as SLURM and ``mpiexec`` signal every task.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import kill_and_reap, mpiexec
from tests.executors.mpi_ranks import mpi_ranks

pytest.importorskip("mpi4py")
pytestmark = [pytest.mark.mpi, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("slow_prepare_cli.py")


def _ranks(marker: str) -> dict[int, int]:
    """rank -> pid of the Python ranks (not the shells around them) whose command line holds ``marker``."""
    return mpi_ranks(lambda cmd: len(cmd) > 2 and cmd[1].endswith(SCRIPT.name.encode())
                     and cmd[2] == marker.encode())


def _signal_while_root_prepares(tmp_path, where: str, argv: list[str], signum: int) -> str:
    """Run ``trajscale argv`` on 2 ranks, signal both once rank 0 prepares and rank 1 waits; return stderr."""
    marker = str(tmp_path / "marker")
    cli = [sys.executable, str(SCRIPT), marker, where, *argv]
    shell = " ".join(f"'{a}'" for a in cli) + f"; echo $? > {tmp_path}/rc.$PMI_RANK"
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen([mpiexec(), "-n", "2", "sh", "-c", shell], stdout=subprocess.DEVNULL, stderr=err,
                                env=env, start_new_session=True, cwd=str(Path(__file__).parents[2]))
    ranks: dict[int, int] = {}
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if Path(marker + ".root").exists() and Path(marker + ".waiting").exists():
                ranks = _ranks(marker)
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(ranks) == 2, log.read_text()[-3000:]
        time.sleep(2.0)   # rank 1 inside the broadcast (between shares: the next one)
        for pid in ranks.values():
            os.kill(pid, signum)
        proc.wait(timeout=120)   # rank 0 still had ~58 s of preparation to go: it did not wait for it
    finally:
        kill_and_reap(proc, list(ranks.values()))
    err = log.read_text()
    code = str(128 + signum)
    # each rank's command's status (its own record; the shell's, where the command exits through Python's
    # own handling, as a script's KeyboardInterrupt does); "killed": neither
    rcs = [Path(f"{marker}.rc.{r}").read_text().strip() if Path(f"{marker}.rc.{r}").exists()
           else (tmp_path / f"rc.{r}").read_text().strip() if (tmp_path / f"rc.{r}").exists() else "killed"
           for r in (0, 1)]
    assert rcs == [code, code], err[-3000:]
    assert "BAD TERMINATION" not in err and "MPI_Abort" not in err and "Traceback" not in err, err[-3000:]
    return err


def _stop_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "terminated" in line or "interrupted" in line
            or "abort" in line.lower() or "failed" in line or "error" in line]


@pytest.mark.parametrize("where, signum", [("before-share", signal.SIGTERM), ("in-prepare", signal.SIGINT),
                                           ("between-shares", signal.SIGTERM)])
def test_a_signal_while_rank_0_prepares_a_run_ends_every_rank(tmp_path, adk_vacuum, adk_vacuum_h5md, where, signum):
    out = tmp_path / "rmsd.csv"
    name = "slow_prepare_rmsd" if where == "in-prepare" else "rmsd"
    err = _signal_while_root_prepares(tmp_path, where, ["run", name, adk_vacuum[0], adk_vacuum_h5md,
                                                        "--executor", "mpi", "--out", str(out)], signum)
    assert _stop_lines(err) == [f"trajscale run: terminated by signal {int(signum)}; no partial output was kept"], err
    assert not out.exists()


@pytest.mark.parametrize("where", ["before-share", "between-shares"])
def test_sigterm_while_rank_0_prepares_a_convert_ends_every_rank(tmp_path, where):
    from MDAnalysisTests.datafiles import TPR, XTC

    out = tmp_path / "out.h5md"
    err = _signal_while_root_prepares(tmp_path, where, ["convert", TPR, XTC, "-o", str(out)], signal.SIGTERM)
    lines = _stop_lines(err)
    assert len(lines) == 1 and lines[0].startswith("trajscale convert: terminated by signal 15"), err
    assert not out.exists()


def test_ctrl_c_while_rank_0_prepares_a_python_run_ends_every_rank(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """``trajscale.run`` from a script (no CLI): Ctrl-C on rank 0 before it shares the job reaches the
    rank waiting in that share as a KeyboardInterrupt, so every rank ends as the script says (130)."""
    _signal_while_root_prepares(tmp_path, "before-share", ["python-run", adk_vacuum[0], adk_vacuum_h5md],
                                signal.SIGINT)
