"""How a Dask run ends when its cluster is elsewhere: a scheduler that cannot be reached gets one line
after a bounded wait; files named relative to the command's directory are found by workers that run in
another one (a real ``dask scheduler`` and ``dask worker`` started here, the worker in its own directory)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.dask_cluster import external_dask

# where distributed is installed (asked without importing it: every pytest worker would at collection)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="needs distributed")

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))


def _trajscale(args: list[str], cwd, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trajscale.cli.main", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=_env(), check=False)


def _free_port() -> int:
    """A port nothing listens on (bound once, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.cli
def test_an_unreachable_scheduler_gets_one_line_after_a_bounded_wait(tmp_path, adk_vacuum):
    address = f"tcp://127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    proc = _trajscale(["run", "rmsd", *adk_vacuum, "--executor", "dask", "--scheduler", address,
                       "--scheduler-timeout", "3", "--out", "r.csv"], tmp_path, timeout=120)
    took = time.monotonic() - t0
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert f"cannot reach the Dask scheduler at {address} within 3 s" in lines[0], lines
    assert took < 60, took   # the wait is bounded by --scheduler-timeout (plus the interpreter's start)
    assert not (tmp_path / "r.csv").exists()


def test_the_wait_for_a_scheduler_is_bounded_by_default_and_configurable():
    from trajscale.clusters import CONNECT_TIMEOUT_S
    from trajscale.errors import ConfigError, ParallelUnavailableError
    from trajscale.executors.dask import DaskExecutor

    assert CONNECT_TIMEOUT_S == 10
    address = f"tcp://127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    with pytest.raises(ParallelUnavailableError, match=f"cannot reach the Dask scheduler at {address} within 1 s"):
        DaskExecutor(scheduler=address, scheduler_timeout=1)
    assert time.monotonic() - t0 < 30
    with pytest.raises(ConfigError, match="more than 0 seconds"):
        DaskExecutor(scheduler=address, scheduler_timeout=0)


@pytest.mark.cli
@pytest.mark.slow   # a scheduler and a worker started, two runs
def test_relative_paths_reach_workers_running_in_another_directory(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """The command names its files relative to its directory; the worker runs elsewhere (a SLURM job's,
    another host's directory) and still reads them: the CSV equals a serial run's, byte for byte."""
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    data.mkdir()
    elsewhere.mkdir()
    shutil.copy(adk_vacuum[0], data / "adk.psf")
    shutil.copy(adk_vacuum_h5md, data / "adk.h5md")
    with external_dask(tmp_path, 1, cwd=elsewhere, env=_env()) as address:
        serial = _trajscale(["run", "rmsd", "adk.psf", "adk.h5md", "--select", "name CA", "--executor", "serial",
                             "--out", "serial.csv"], data)
        assert serial.returncode == 0, serial.stderr
        import distributed

        with distributed.Client(address, timeout=120) as client:
            client.wait_for_workers(1, timeout=120)
            assert set(client.run(os.getcwd).values()) == {str(elsewhere)}   # the worker is elsewhere
        got = _trajscale(["run", "rmsd", "adk.psf", "adk.h5md", "--select", "name CA", "--executor", "dask",
                          "--scheduler", address, "--tasks", "4", "--out", "dask.csv"], data)
        assert got.returncode == 0, got.stderr + (tmp_path / "worker0.log").read_text()[-3000:]
        assert (data / "dask.csv").read_bytes() == (data / "serial.csv").read_bytes()
        # convert's workers write the output named relative to the command's directory, reading inputs so named
        shutil.copy(adk_vacuum[1], data / "adk.dcd")
        conv = _trajscale(["convert", "adk.psf", "adk.dcd", "-o", "out.h5md", "--executor", "dask",
                           "--scheduler", address, "--chunks", "10", "--no-progress"], data)
        assert conv.returncode == 0, conv.stderr + (tmp_path / "worker0.log").read_text()[-3000:]
        assert not list(elsewhere.glob("*.h5md*")) and not list(elsewhere.glob(".*h5md*"))
        import h5py
        import MDAnalysis as mda

        u = mda.Universe(adk_vacuum[0], adk_vacuum[1])
        with h5py.File(data / "out.h5md") as f:
            got_pos = f["particles/all/position/value"][()]
        import numpy as np

        np.testing.assert_allclose(got_pos, np.array([u.atoms.positions.copy() for _ in u.trajectory]), atol=1e-4)


@pytest.mark.slow(seconds=6)
def test_a_stopped_local_cluster_says_nothing_of_its_killed_workers():
    """A run that fails or is stopped kills its LocalCluster's workers: their nannies, which live in this
    process, must not then log "Restarting worker" at WARNING (the CLI shows that level), as they did in about
    half of such stops, beside the run's one line."""
    import logging

    from trajscale.executors.dask import DaskExecutor

    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    lg = logging.getLogger("distributed")
    level, keep = lg.level, Keep(logging.WARNING)
    lg.addHandler(keep)
    try:
        for _ in range(3):
            ex = DaskExecutor(2)
            assert ex.client is not None
            lg.setLevel(logging.WARNING)   # (as the CLI has distributed set it; its own default is INFO)
            time.sleep(0.3)
            ex.close(wait=False)
            time.sleep(0.3)
    finally:
        lg.removeHandler(keep)
        lg.setLevel(level)
    assert not [m for m in said if "Restarting worker" in m], said
