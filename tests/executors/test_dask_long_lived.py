"""A long-lived Dask cluster: rewritten files are reread, caches freed on close, user errors not retried."""

from __future__ import annotations

import numpy as np
import pytest

import trajscale as ts
from tests.dask_cluster import users_cluster
from tests.executors.test_long_lived import SELECT, _mda_rmsd, rewritten  # noqa: F401 - fixture
from trajscale.errors import BadCoordinatesError

distributed = DaskExecutor = KEY_PREFIX = None   # set by _distributed, where it is installed


@pytest.fixture(scope="module", autouse=True)
def _distributed():
    """distributed and the Dask executor, imported (or the module skipped) when its first test runs: at the
    module's top every pytest worker would pay their import at collection, whatever tests it runs."""
    global distributed, DaskExecutor, KEY_PREFIX
    distributed = pytest.importorskip("distributed")
    from trajscale.executors.dask import KEY_PREFIX, DaskExecutor


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with users_cluster(tmp_path_factory.mktemp("dask")) as c:
        yield c


def _open_sources() -> int:
    from trajscale.executors import base

    return len(base._SOURCES)


def test_reused_cluster_reads_the_rewritten_file(adk_vacuum, rewritten, cluster):   # noqa: F811 - the fixture
    path, rewrite = rewritten
    with distributed.Client(cluster) as client:
        ex = DaskExecutor(client=client)
        first = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], str(path), executor=ex, n_tasks=8)
        rewrite()
        second = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], str(path), executor=ex, n_tasks=8)
        np.testing.assert_allclose(first.rmsd, _mda_rmsd(*adk_vacuum, 0, 98), atol=1e-4)
        np.testing.assert_allclose(second.rmsd, _mda_rmsd(*adk_vacuum, 50, 60), atol=1e-4)
        # the workers keep their files between runs, and close them (buffers freed) with the executor
        assert sum(client.run(_open_sources).values()) >= 1
        ex.close()
        assert client.run(_open_sources) == {w: 0 for w in client.scheduler_info()["workers"]}


class CountStarts:
    """Scheduler plugin: how many times each trajscale task was handed to a worker."""

    name = "count-trajscale-starts"

    def __init__(self) -> None:
        self.starts: dict[str, int] = {}

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if isinstance(key, str) and key.startswith(KEY_PREFIX) and finish == "processing":
            self.starts[key] = self.starts.get(key, 0) + 1


def _starts(dask_scheduler=None) -> dict:
    return dict(dask_scheduler.plugins[CountStarts.name].starts)


def test_nan_coordinates_fail_once_not_retried(tmp_path, adk_vacuum, adk_vacuum_h5md, cluster):
    import shutil

    import h5py
    from distributed.diagnostics.plugin import SchedulerPlugin

    bad = tmp_path / "nan.h5md"
    shutil.copy(adk_vacuum_h5md, bad)
    with h5py.File(bad, "r+") as f:
        f["particles/all/position/value"][60] = np.nan
    plugin = type("Counter", (CountStarts, SchedulerPlugin), {})()
    with distributed.Client(cluster) as client:
        client.register_plugin(plugin, name=CountStarts.name)
        with pytest.raises(BadCoordinatesError, match="frame 60"):
            ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], str(bad),
                   executor=DaskExecutor(client=client, retries=2), n_tasks=4)
        starts = client.run_on_scheduler(_starts)
    assert starts and max(starts.values()) == 1, starts   # with Dask retries: the failing task ran 3 times


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_client_on_outside_cluster_runs_under_a_launcher(adk_vacuum, adk_vacuum_h5md, cluster, monkeypatch):
    """dask-mpi style: one rank of an mpiexec job is the Dask client. That run goes ahead, while
    a serial run in the same environment is refused (it would be repeated by every rank)."""
    monkeypatch.setenv("PMI_SIZE", "4")
    monkeypatch.setenv("PMI_RANK", "1")
    with pytest.raises(ts.TrajscaleError, match="as 4 processes"):
        ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], adk_vacuum_h5md)
    with distributed.Client(cluster) as client:
        r = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], adk_vacuum_h5md,
                   executor=DaskExecutor(client=client), n_tasks=2)
    np.testing.assert_allclose(r.rmsd, _mda_rmsd(*adk_vacuum, 0, 98), atol=1e-4)
