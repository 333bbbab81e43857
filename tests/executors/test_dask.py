"""The Dask executor: same numbers as serial on 1 and 2 workers, and after a worker dies."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import trajscale as ts
from tests.dask_cluster import users_cluster
from tests.executors import slow_analysis

distributed = DaskExecutor = None   # set by _distributed, where it is installed


@pytest.fixture(scope="module", autouse=True)
def _distributed():
    """distributed and the Dask executor, imported (or the module skipped) when its first test runs: at the
    module's top every pytest worker would pay their import at collection, whatever tests it runs."""
    global distributed, DaskExecutor
    distributed = pytest.importorskip("distributed")
    from trajscale.executors.dask import DaskExecutor


GROUPS = ["backbone", "resid 1-50"]


def rmsd(cls=ts.RMSD, **kw):
    return cls(select="name CA", groupselections=GROUPS, **kw)


@pytest.fixture(scope="module")
def serial_table(adk_vacuum, adk_vacuum_h5md):
    return ts.run(rmsd(), adk_vacuum[0], adk_vacuum_h5md).table()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with users_cluster(tmp_path_factory.mktemp("dask")) as c:
        yield c


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("n_workers", [1, 2])
def test_local_cluster_equals_serial(adk_vacuum, adk_vacuum_h5md, serial_table, n_workers):
    r = ts.run(rmsd(), adk_vacuum[0], adk_vacuum_h5md, executor="dask", n_workers=n_workers)
    np.testing.assert_array_equal(r.table(), serial_table)
    rep = r.report
    assert rep.executor == "dask" and rep.n_workers == n_workers and rep.n_tasks == 4 * n_workers
    assert [t.task for t in rep.tasks] == list(range(rep.n_tasks))
    assert len({t.worker for t in rep.tasks}) <= n_workers
    assert all(t.worker.startswith("tcp://") for t in rep.tasks)
    for t in rep.tasks:   # scheduler-side times bracket the worker's own
        assert t.t_sched_start is not None and t.t_sched_stop is not None
        assert t.t_sched_start <= t.t_begin + 0.05 and t.t_end <= t.t_sched_stop + 0.05


def test_dcd_on_given_client_stays_open(adk_vacuum, serial_table, cluster):
    with distributed.Client(cluster) as client:
        ex = DaskExecutor(client=client)
        assert ex.n_workers == 2
        r = ts.run(rmsd(), *adk_vacuum, executor=ex, n_tasks=5)
        np.testing.assert_array_equal(r.table(), serial_table)
        ex.close()
        assert client.status == "running"   # never closes a client it was given
        assert client.submit(sum, [1, 2]).result() == 3


def test_scheduler_address(adk_vacuum, adk_vacuum_h5md, serial_table, cluster):
    r = ts.run(rmsd(), adk_vacuum[0], adk_vacuum_h5md, executor="dask",
               scheduler=cluster.scheduler_address, n_tasks=3)
    np.testing.assert_array_equal(r.table(), serial_table)


def test_task_error_names_frames(tmp_path, adk_vacuum, adk_vacuum_h5md, cluster):
    import shutil

    import h5py

    bad = tmp_path / "nan.h5md"
    shutil.copy(adk_vacuum_h5md, bad)
    with h5py.File(bad, "r+") as f:
        f["particles/all/position/value"][60] = np.nan
    with distributed.Client(cluster) as client, pytest.raises(ts.TrajscaleError, match="frame 60"):
        ts.run(rmsd(), adk_vacuum[0], str(bad), executor=DaskExecutor(client=client, retries=0),
               n_tasks=4)


@pytest.mark.slow
def test_killed_worker_does_not_change_result(adk_vacuum, adk_vacuum_h5md, serial_table, tmp_path):
    """SIGKILL one of two workers mid-run: its tasks rerun elsewhere, the result is identical."""
    slow_analysis.register()
    with users_cluster(tmp_path) as cluster, distributed.Client(cluster) as client:
        client.register_plugin(slow_analysis.worker_plugin(), name="register-slow-rmsd")
        pids = client.run(os.getpid)
        victim = min(pids.values())
        killed = {}

        def kill() -> None:
            os.kill(victim, signal.SIGKILL)
            killed["at"] = time.time()

        timer = threading.Timer(1.0, kill)
        t0 = time.time()
        timer.start()
        # 30 tasks of at least one 0.2 s block on two workers: 3 s at least, so a timer thread woken late on a
        # loaded machine still kills within the run (0.1 s blocks left it 0.5 s after the kill at 1 s)
        r = ts.run(rmsd(slow_analysis.SlowRMSD, delay=0.2), adk_vacuum[0], adk_vacuum_h5md,
                   executor=DaskExecutor(client=client), n_tasks=30)
        t1 = time.time()
        timer.join()
        assert t0 < killed["at"] < t1, "the worker was not killed during the run"
        np.testing.assert_array_equal(r.table(), serial_table)
        assert r.report.n_tasks == 30
        assert victim not in client.run(os.getpid).values()


@pytest.mark.slow(seconds=2)
def test_a_local_clusters_workers_are_forked_not_spawned(adk_vacuum, adk_vacuum_h5md, serial_table):
    """trajscale's LocalCluster forks its workers from a forkserver that has imported distributed, instead of
    spawning each to import it again; their results are the serial ones."""
    from trajscale.clusters import dask_cluster

    made = dask_cluster(2)
    try:
        parents = made.client.run(os.getppid)
        # spawned, a worker is a child of the process holding its nanny (this one); forked, of the forkserver
        assert len(parents) == 2 and os.getpid() not in parents.values(), parents
        r = ts.run(rmsd(), adk_vacuum[0], adk_vacuum_h5md, executor=DaskExecutor(client=made.client))
        np.testing.assert_array_equal(r.table(), serial_table)
    finally:
        made.close()


def _worker_keeps(message: str) -> bool:
    """Whether a worker's ``distributed.worker`` logger lets a record of ``message`` through (run on workers)."""
    import logging

    record = logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, message, None, None)
    return bool(logging.getLogger("distributed.worker").filter(record))


@pytest.mark.slow(seconds=2)
def test_a_local_clusters_workers_drop_failed_heartbeat_tracebacks():
    """A heartbeat that finds the scheduler's connection closed (a loaded machine, or the cluster closing) is
    logged by distributed with a traceback and tried again at the next beat: the workers of a LocalCluster
    trajscale starts drop that record, and keep every other one."""
    from trajscale.clusters import dask_cluster

    made = dask_cluster(2)
    try:
        dropped = made.client.run(_worker_keeps, "Failed to communicate with scheduler during heartbeat.")
        kept = made.client.run(_worker_keeps, "Worker exceeded 95% memory budget. Restarting...")
    finally:
        made.close()
    assert len(dropped) == 2 and not any(dropped.values()), dropped
    assert all(kept.values()), kept


def test_a_start_method_the_dask_configuration_names_passes_the_rule(monkeypatch, adk_vacuum, adk_vacuum_h5md):
    """The Dask configuration's start method for a LocalCluster's workers passes the rule every worker process
    starts by: ``fork``, unsafe once Dask's event loop runs in a thread here, is refused in one line before a
    worker starts (from Python and on the command line, exit status 2); a method this platform lacks likewise."""
    import dask

    from tests.conftest import run_cli_here
    from trajscale.clusters import dask_cluster
    from trajscale.errors import ConfigError

    monkeypatch.delenv("TRAJSCALE_START_METHOD", raising=False)
    key = "distributed.worker.multiprocessing-method"
    with dask.config.set({key: "fork"}):
        with pytest.raises(ConfigError) as caught:
            dask_cluster(1)
        proc = run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--executor", "dask", "-n", "1",
                            "--no-progress")
    said = str(caught.value)
    assert said.startswith(f"Dask's {key}='fork' refused: Dask's event loop runs in a thread of this process")
    assert "\n" not in said and "choose forkserver" in said
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"trajscale run: error: {said}"], proc
    with dask.config.set({key: "nope"}), pytest.raises(ConfigError, match=f"^Dask's {key} 'nope' is not available"):
        dask_cluster(1)
