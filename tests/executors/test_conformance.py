"""Every executor passes :class:`trajscale.testing.ExecutorConformance`: serial, processes, threads and
Dask in this process, MPI under ``mpiexec -n 2`` (its ranks run :mod:`tests.executors.mpi_conformance`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import mpiexec
from trajscale.testing import ExecutorConformance
from trajscale.testing.executors import descendants

ROOT = Path(__file__).resolve().parents[2]


class TestSerial(ExecutorConformance):
    @classmethod
    def new_executor(cls):
        from trajscale.executors.serial import SerialExecutor

        return SerialExecutor()


class TestProcesses(ExecutorConformance):
    @classmethod
    def new_executor(cls):
        from trajscale.executors.processes import ProcessExecutor

        return ProcessExecutor(2)


class TestThreads(ExecutorConformance):
    @classmethod
    def new_executor(cls):
        from trajscale.executors.threads import ThreadExecutor

        return ThreadExecutor(2)


@pytest.mark.slow   # a LocalCluster started for the class, and one more for Ctrl-C
class TestDask(ExecutorConformance):
    @classmethod
    def new_executor(cls):
        pytest.importorskip("distributed")
        from trajscale.executors.dask import DaskExecutor

        return DaskExecutor(2)


def _env() -> dict:
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))


@pytest.mark.mpi
@pytest.mark.slow
def test_mpi_passes_the_suite_on_two_ranks(tmp_path):
    """The suite's tests on both ranks of one ``mpiexec -n 2`` job (each rank a pytest of the same tests)."""
    pytest.importorskip("mpi4py")
    proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, str(ROOT / "tests/executors/mpi_conformance.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=600, env=_env(), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for rank in (0, 1):   # every test ran (the two that would abort the job are skipped there), none failed
        assert f"rank {rank}: 4 passed, 2 skipped" in out, out[-4000:]


#: An MPI run whose rank 0 says when it prepares (and, asked to, stalls there for a minute) and whose tasks say
#: when they run (a minute of them).
CTRL_C_SCRIPT = """
import sys, time
import trajscale as ts
from MDAnalysisTests.datafiles import DCD, PSF
from trajscale.analysis import ANALYSES
from trajscale.analysis.user import PerFrame

class StallingPrepare(PerFrame):
    name = "stalling_prepare"

    def prepare(self, universe, source):
        print("preparing", flush=True)
        time.sleep(60 if sys.argv[1] == "prepare" else 0)
        return super().prepare(universe, source)

    def get_config(self):
        return {**super().get_config(), "name": self.name}

ANALYSES[StallingPrepare.name] = StallingPrepare

def slow(positions, box):
    print("mapping", flush=True)
    time.sleep(1.2)
    return positions[:, 0, 0].astype(float)

ts.run(StallingPrepare(slow), PSF, DCD, executor="mpi", n_tasks=98)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("phase", ["prepare", "tasks"])
def test_mpi_ctrl_c_ends_every_rank(tmp_path, phase):
    """Ctrl-C at a terminal (SIGINT to mpiexec's process group) while rank 0 prepares the job (the other
    ranks wait for it in a broadcast) or while the tasks run: every rank ends, long before the minute the
    run would take, and none is left behind.  (mpiexec's exit status after a Ctrl-C it forwarded is 0 or
    2, as it happens: the time tells.)"""
    pytest.importorskip("mpi4py")
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_SCRIPT)
    proc = subprocess.Popen([mpiexec(), "-n", "2", sys.executable, str(script), phase], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
    try:
        want = "preparing" if phase == "prepare" else "mapping"
        while (line := proc.stdout.readline()) and line.strip() != want:
            pass
        assert line.strip() == want, proc.stderr.read()[-3000:]
        job = descendants(proc.pid)   # the proxy and the ranks (each in a process group of its own)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)   # a terminal's Ctrl-C: mpiexec forwards it to every rank
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=120)
        ended = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert ended < 30, err[-3000:]
    assert "KeyboardInterrupt" in err or "signal 2" in err, err[-3000:]
    deadline = time.monotonic() + 60
    while (left := job & descendants(1)) and time.monotonic() < deadline:   # none of them lives on, anywhere
        time.sleep(0.1)
    assert len(job) >= 2 and not left, f"processes of the interrupted MPI job still alive: {sorted(left)}"
