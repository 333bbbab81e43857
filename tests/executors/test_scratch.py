"""A run's workers keep their files in one temporary folder of the run's (``trajscale-tasks-PID-*``), removed when
the pool or cluster closes; the folders of parents that were killed are removed by the next run."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from trajscale.util import TASKS_PREFIX


def _dead_pid() -> int:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(gone.stdout)


@pytest.fixture
def temp_folder(tmp_path, monkeypatch):
    """The temporary folder of this process and of the workers it starts: ``tmp_path``."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)   # (asked again: TMPDIR)
    return tmp_path


def _ours(folder) -> list[str]:
    """What trajscale and the libraries it starts left in ``folder`` (multiprocessing's own ``pymp-*`` folder
    lives as long as this process)."""
    return sorted(n for n in os.listdir(folder) if not n.startswith("pymp-"))


@pytest.mark.cli
@pytest.mark.slow(seconds=2)
def test_a_killed_parents_tasks_folder_is_removed_by_the_next_pool(temp_folder):
    from trajscale.executors.processes import ProcessExecutor

    dead = temp_folder / f"{TASKS_PREFIX}{_dead_pid()}-left"
    dead.mkdir()
    (dead / "ready-1").write_text("x")
    alive = temp_folder / f"{TASKS_PREFIX}{os.getppid()}-running"   # (a running process's folder is kept)
    alive.mkdir()
    with ProcessExecutor(1, start_method="spawn") as ex:
        ex.start()
        mine = ex._marks
        assert os.path.basename(mine).startswith(f"{TASKS_PREFIX}{os.getpid()}-")
        assert not dead.exists() and alive.is_dir()
    assert _ours(temp_folder) == [alive.name]


@pytest.mark.slow(seconds=3)
def test_dask_scratch_space_is_in_the_runs_folder_and_goes_with_it(temp_folder):
    from trajscale.clusters import dask_cluster

    made = dask_cluster(1)
    try:
        (folder,) = _ours(temp_folder)   # the scheduler's and the worker's scratch space are in it
        assert folder.startswith(f"{TASKS_PREFIX}{os.getpid()}-")
        assert os.listdir(temp_folder / folder) == ["dask-scratch-space"]
    finally:
        made.close()
    assert _ours(temp_folder) == []


@pytest.mark.cli
@pytest.mark.slow(seconds=2)
def test_a_pool_never_closed_leaves_no_folder_when_its_process_exits(temp_folder):
    """A script that starts a pool and exits without closing it (as a notebook or a test may) leaves nothing."""
    script = ("from trajscale.executors.processes import ProcessExecutor\n"
              "ex = ProcessExecutor(1, start_method='spawn'); ex.start(); ex.worker_starts()\n"
              "import os; print(os.path.isdir(ex._marks))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(temp_folder)})
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr
    assert _ours(temp_folder) == []
