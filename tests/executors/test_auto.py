"""``executor="auto"``: serial for short jobs, processes when the work outweighs starting them."""

from __future__ import annotations

import multiprocessing as mp

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

import trajscale as ts
import trajscale.executors as executors
from tests.conftest import run_cli_here
from trajscale.errors import ConfigError
from trajscale.executors.processes import ProcessExecutor, choose_start_method


@pytest.fixture(scope="module")
def mda_rmsd(adk_vacuum):
    return rms.RMSD(mda.Universe(*adk_vacuum), select="name CA").run().results.rmsd[:, 2]


def test_short_job_runs_serially_and_says_why(adk_vacuum, adk_vacuum_h5md, mda_rmsd):
    r = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md, executor="auto", n_workers=2)
    assert r.report.executor == "serial"
    why = str(r.report.meta.executor_choice)
    assert why.startswith("auto: serial (estimated work") and "to start them" in why, why
    np.testing.assert_allclose(r.rmsd, mda_rmsd, atol=1e-4)


def test_long_job_runs_on_processes(adk_vacuum, adk_vacuum_h5md, mda_rmsd, monkeypatch):
    # 98 frames are short: pretend each costs a second, so starting workers pays off
    monkeypatch.setattr(executors, "MAP_S_PER_ATOM_FRAME", 1.0)
    r = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md, executor="auto", n_workers=2)
    assert r.report.executor == "processes" and r.report.n_workers == 2
    assert str(r.report.meta.executor_choice).startswith("auto: processes")
    np.testing.assert_allclose(r.rmsd, mda_rmsd, atol=1e-4)
    from trajscale.executors import base

    assert base._SOURCES == {}   # the source opened while preparing is not left open here


@pytest.mark.parametrize("frames, atoms, n, expected", [
    (2000, 564, 2, "serial"), (100_000, 47_681, 2, "processes"), (100_000, 47_681, 1, "serial")])
def test_choice_follows_the_estimate(frames, atoms, n, expected):
    from trajscale.runspec import JobFacts

    choice, why = executors.choose_executor(JobFacts(start=0, stop=frames, n_atoms=atoms, frame_bytes=12 * atoms), n)
    assert choice == expected, why


def test_cli_default_is_auto(adk_vacuum, adk_vacuum_h5md):
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--select", "name CA")
    assert proc.returncode == 0, proc.stderr
    assert "rmsd on serial x1" in proc.stdout and "executor auto: serial" in proc.stdout, proc.stdout


def test_fork_when_no_thread_runs(monkeypatch):
    monkeypatch.delenv("TRAJSCALE_START_METHOD", raising=False)
    import threading

    for _ in range(100):   # a thread an earlier test left may end meanwhile: judge a choice the count held over
        before = threading.active_count()
        chosen = choose_start_method()
        if threading.active_count() == before:
            break
    if before > 1:
        assert chosen in ("forkserver", "spawn")
    else:
        assert chosen == "fork"
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert choose_start_method() in ("forkserver", "spawn")   # fork with a thread running is unsafe
    finally:
        stop.set()
        t.join()
    with pytest.raises(ConfigError, match="start method 'nope'"):
        ProcessExecutor(2, start_method="nope")


def test_fork_asked_for_where_it_is_unsafe_is_refused_in_one_line(monkeypatch):
    """An explicit fork (argument or environment) is obeyed only where this process could fork safely: with
    another thread running it is refused, saying why, not obeyed (a lock that thread holds stays held in
    the child)."""
    import threading

    monkeypatch.delenv("TRAJSCALE_START_METHOD", raising=False)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        with pytest.raises(ConfigError) as caught:
            choose_start_method("fork")
        said = str(caught.value)
        assert said.startswith("start_method='fork' refused: ") and "other thread" in said and "\n" not in said
        monkeypatch.setenv("TRAJSCALE_START_METHOD", "fork")
        with pytest.raises(ConfigError, match="^TRAJSCALE_START_METHOD=fork refused: .*other thread"):
            choose_start_method()
        assert choose_start_method("forkserver") == "forkserver"   # the argument before the environment
    finally:
        stop.set()
        t.join()


@pytest.mark.fork
def test_a_queues_feeder_thread_does_not_flip_fork_to_forkserver(monkeypatch):
    """A finished PyTorch loader epoch leaves its queues' feeder threads behind for a while.  They hold
    only their queue's locks, which the queue replaces in a forked child, so they are no reason to stop
    forking: counting them flipped the next epoch to forkserver, whose workers re-ran the top level of a
    script without a main guard (and failed on the files it had just written). (Marked ``fork``: it runs
    where this process would fork by default, alone in a fresh one otherwise, whichever worker got it.)"""
    import threading

    monkeypatch.delenv("TRAJSCALE_START_METHOD", raising=False)
    q = mp.get_context("fork").Queue()
    q.put(1)   # starts the queue's feeder thread, which stays until the queue is closed
    try:
        assert any(t.name == "QueueFeederThread" for t in threading.enumerate())
        assert choose_start_method() == "fork"
        assert choose_start_method("fork") == "fork"
        child = mp.get_context("fork").Process(target=q.put, args=(2,))   # the child uses the queue itself
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert sorted([q.get(timeout=60), q.get(timeout=60)]) == [1, 2]
    finally:
        q.close()
        q.join_thread()
