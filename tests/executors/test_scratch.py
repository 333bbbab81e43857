"""A run's workers keep their files in one temporary folder of the run's (``trajscale-tasks-PID-*``), removed when
the pool or cluster closes; the folders of parents that were killed are removed by the next run."""

from __future__ import annotations

import json
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


@pytest.mark.cli
def test_asking_which_start_method_makes_no_folder_starting_workers_makes_one():
    """Planning (the auto executor's choice, a late pool's method) only asks the rule: no folder appears and the
    forkserver's socket stays where it was; a starter makes the process's folder for it, once (in a temporary
    folder short enough for a socket's path)."""
    script = """if True:
        import json, multiprocessing as mp, os, types
        from trajscale.executors import choose_executor, late_start_method
        from trajscale.pools import choose_start_method, prepare_start
        job = types.SimpleNamespace(n_frames=10**6, n_atoms=10**5, span_atoms=None, decode_s_per_frame=0.0,
                                    cost=None, reads_ahead=False)
        asked = [late_start_method(), choose_start_method(late=True), choose_executor(job, n_workers=4)[0]]
        planned = [os.listdir(os.environ["TMPDIR"]), mp.current_process()._config.get("tempdir")]
        started = [prepare_start(late=True), prepare_start("forkserver")]
        print(json.dumps([os.getpid(), asked, planned, started, os.listdir(os.environ["TMPDIR"]),
                          mp.current_process()._config.get("tempdir")]))
    """
    env = {k: v for k, v in os.environ.items() if k != "TRAJSCALE_START_METHOD"}
    with tempfile.TemporaryDirectory(prefix="plan-") as temp_folder:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              env={**env, "TMPDIR": temp_folder})
    assert proc.returncode == 0, proc.stderr
    pid, asked, planned, started, folders, tempdir = json.loads(proc.stdout)
    assert asked == ["forkserver", "forkserver", "processes"]
    assert planned == [[], None]   # nothing made, the socket's place untouched
    assert started == ["forkserver", "forkserver"]
    (folder,) = folders   # one for both starts, the process's own, where the socket now goes
    assert folder.startswith(f"{TASKS_PREFIX}{pid}-") and tempdir == os.path.join(temp_folder, folder)
