"""Real Dask clusters for the tests: a user's own ``LocalCluster``, or separate ``dask scheduler`` and ``dask worker``
processes. Each keeps its scratch in the test's folder: Dask's default, the temporary folder's
``dask-scratch-space``, would be left behind (the suite's session checks that nothing is)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def users_cluster(scratch: Path, dashboard: str | None = ":0"):
    """A user's own two-worker ``distributed.LocalCluster``, its scheduler's and workers' scratch in ``scratch``."""
    import dask
    import distributed

    with dask.config.set({"temporary-directory": str(scratch)}):
        return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                        dashboard_address=dashboard, local_directory=str(scratch))


@contextlib.contextmanager
def external_dask(folder: Path, workers: int, cwd: Path | None = None, env: dict | None = None,
                  timeout: float = 120) -> Iterator[str]:
    """Start a scheduler and ``workers`` one-thread workers on 127.0.0.1 (free ports), from ``cwd`` with
    ``env``; their logs are ``folder/scheduler.log`` and ``folder/worker{i}.log``. Yields the scheduler's
    address; every process is terminated after (killed if it does not end in 30 s)."""
    dask = shutil.which("dask", path=str(Path(sys.executable).parent)) or "dask"
    sched_file = folder / "scheduler.json"

    env = {**(os.environ if env is None else env), "DASK_TEMPORARY_DIRECTORY": str(folder)}

    def start(args: list[str], log: str) -> subprocess.Popen:
        return subprocess.Popen([dask, *args], cwd=cwd or folder, stdout=open(folder / log, "w"),
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)

    procs = [start(["scheduler", "--scheduler-file", str(sched_file), "--port", "0", "--no-dashboard",
                    "--host", "127.0.0.1"], "scheduler.log")]
    try:
        deadline = time.monotonic() + timeout
        while not sched_file.exists() and procs[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sched_file.exists(), (folder / "scheduler.log").read_text()
        address = json.loads(sched_file.read_text())["address"]
        for i in range(workers):
            procs.append(start(["worker", address, "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
                               f"worker{i}.log"))
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
