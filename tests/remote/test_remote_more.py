"""More of a URL's paths, against the real S3 server: xarray's own ``open_dataset`` with ``engine="trajscale"``,
an external Dask cluster (a ``dask scheduler`` and two ``dask worker`` processes) whose workers get the
endpoint and credentials with the job, and a proxy that holds requests past the client's timeout."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.conftest import run_cli, run_cli_here
from tests.dask_cluster import external_dask

from .conftest import CREDENTIALS, TPR, FlakyProxy

pytestmark = pytest.mark.remote

ROOT = Path(__file__).resolve().parents[2]
SELECT = ["--select", "name CA"]
POSITIONS = "particles/all/position/value"


def _no_aws_env() -> dict:
    """This process's environment without any AWS setting: what reaches the server must come with the job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def _options(server) -> dict:
    return {"endpoint_url": server.endpoint, "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "region_name": "us-east-1"}


def _cli_options(server) -> list[str]:
    return [a for k, v in _options(server).items() for a in ("--storage-option", f"{k}={v}")]


def test_xarrays_open_dataset_reads_a_url_with_storage_options(s3_server, adk_stores, monkeypatch):
    """``xr.open_dataset(URL, engine="trajscale", storage_options=...)``, nothing in the environment: the arrays
    are h5py's of the local file, lazily and under Dask."""
    import xarray as xr

    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    from trajscale.storage import objects

    objects.forget_heads()
    for store in ("plain", "gzip"):
        local, url, _ = adk_stores[store]
        with h5py.File(local) as f:   # h5py on the local copy: the reference
            want = f[POSITIONS][()]
        ds = xr.open_dataset(url, engine="trajscale", storage_options=_options(s3_server))
        assert np.array_equal(ds.positions.values, want)
        assert np.array_equal(ds.positions.isel(frame=slice(3, 7)).values, want[3:7])
        lazy = xr.open_dataset(url, engine="trajscale", storage_options=_options(s3_server), chunks={})
        assert lazy.positions.chunks is not None
        assert np.array_equal(lazy.positions.compute(scheduler="threads").values, want)


@pytest.mark.slow   # a scheduler and two workers started
def test_a_urls_layout_facts_say_its_size_as_the_local_files(s3_env, adk_stores):
    """A run over a URL reports the object's size (its identity's: no request more), as a run over the local
    file reports the file's; only the local file do MPI ranks open together (MPI-IO reads a file system's)."""
    from trajscale.sources import open_source

    local, url, _ = adk_stores["gzip"]
    with open_source(local) as a, open_source(url) as b:
        here, there = a.layout_summary(), b.layout_summary()
    assert there.file_bytes == here.file_bytes == os.path.getsize(local)
    assert (here.collective_open, there.collective_open) == (True, False)


@pytest.mark.cli   # its scheduler and workers are processes of their own
def test_an_external_dask_cluster_reads_a_url_with_the_jobs_options(s3_server, adk_stores, tmp_path):
    """``run ... s3://... --executor dask --scheduler tcp://...`` with a real scheduler and two workers started
    without any AWS setting: the endpoint and credentials given as ``--storage-option`` reach the workers with
    the job; the CSV is the local file's, byte for byte; the secret is in no report, log or output."""
    pytest.importorskip("distributed")
    local, url, _ = adk_stores["gzip"]
    with external_dask(tmp_path, 2, env=_no_aws_env()) as address:
        import distributed

        with distributed.Client(address, timeout=120) as client:
            client.wait_for_workers(2, timeout=120)
            assert not any(k.startswith("AWS_") for env in client.run(lambda: dict(os.environ)).values()
                           for k in env)   # the workers know no endpoint and no credentials of their own
        out, report = tmp_path / "dask.csv", tmp_path / "report.json"
        got = run_cli("run", "rmsd", TPR, url, "--out", str(out), *SELECT, "--executor", "dask", "--scheduler",
                      address, "--tasks", "4", "--report", str(report), *_cli_options(s3_server),
                      env=_no_aws_env(), timeout=300)
        logs = "".join((tmp_path / f"worker{i}.log").read_text() for i in range(2))
        assert got.returncode == 0, got.stderr + logs[-3000:]
        here = tmp_path / "local.csv"
        ref = run_cli_here("run", "rmsd", TPR, local, "--out", str(here), *SELECT, "--executor", "serial",
                           env=_no_aws_env())
        assert ref.returncode == 0, ref.stderr
        assert out.read_bytes() == here.read_bytes()
        tasks = json.loads(report.read_text())["tasks"]
        assert len(tasks) == 4 and sum(t["requests"] for t in tasks) > 0
        secret = CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
        for text in (report.read_text(), got.stdout, got.stderr, out.read_text(), logs):
            assert secret not in text


@pytest.mark.cli
def test_requests_held_past_the_timeout_are_retried_and_counted(s3_server, adk_stores, tmp_path):
    """A proxy holds the first try of each range request 3 s, past the client's 1 s timeout: each is retried,
    the retries are in the report, and the CSV is the local file's."""
    local, url, _ = adk_stores["gzip"]
    proxy = FlakyProxy(s3_server.endpoint, failures=1000, how="delay", delay=3)
    try:
        out, report = tmp_path / "remote.csv", tmp_path / "report.json"
        proc = run_cli_here("run", "rmsd", TPR, url, "--out", str(out), *SELECT, "--report", str(report),
                            "--storage-option", f"endpoint_url={proxy.endpoint}", "--storage-option", "timeout=1",
                            env=s3_server.subprocess_env())
    finally:
        proxy.close()
    assert proc.returncode == 0, proc.stderr
    here = tmp_path / "local.csv"
    ref = run_cli_here("run", "rmsd", TPR, local, "--out", str(here), *SELECT, env=s3_server.subprocess_env())
    assert ref.returncode == 0, ref.stderr
    assert out.read_bytes() == here.read_bytes()
    tasks = json.loads(report.read_text())["tasks"]
    assert sum(t["retries"] for t in tasks) >= sum(t["requests"] for t in tasks) / 2 > 0
    assert "retries" in proc.stdout


@pytest.mark.cli
def test_requests_held_for_good_end_the_run_in_one_line_in_bounded_time(s3_server, adk_stores, tmp_path):
    """Every try of every range request held past the timeout: the run gives up after ``retry_seconds`` as the
    server's failure (its own exit status), in one line naming the server, with nothing under the output's name."""
    _, url, _ = adk_stores["plain"]
    s3_server.client().copy_object(Bucket="traj", Key="held.h5md", CopySource={"Bucket": "traj",
                                                                              "Key": url.split("/", 3)[3]})
    held = "s3://traj/held.h5md"
    proxy = FlakyProxy(s3_server.endpoint, failures=10**9, how="delay", delay=5, every_try=True)
    out = tmp_path / "held.csv"
    t0 = time.monotonic()
    try:
        proc = run_cli_here("run", "rmsd", TPR, held, "--out", str(out), *SELECT,
                            "--storage-option", f"endpoint_url={proxy.endpoint}", "--storage-option", "timeout=1",
                            "--storage-option", "retry_seconds=3", env=s3_server.subprocess_env())
    finally:
        proxy.close()
    took = time.monotonic() - t0
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 9 and "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("trajscale run: error: s3://traj: did not answer in 3 s"), lines
    assert took < 90, took
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(("held", ".held"))]


def test_a_port_number_never_reads_as_a_status():
    """obstore's messages name the URL: a server on port 35037 is no 503, one on 41234 no 412."""
    from trajscale.storage.retry import classify

    class PreconditionError(Exception):
        pass

    replaced = PreconditionError("Request precondition failed for http://127.0.0.1:35037/traj/x.h5md in 3ms - "
                                 "Server returned non-2xx status code: 412 Precondition Failed")
    assert not classify(replaced).retry and "replaced" in classify(replaced).problem
    denied = Exception("Error performing GET http://127.0.0.1:41234/traj/x.h5md - Server returned non-2xx "
                       "status code: 403 Forbidden")
    assert not classify(denied).retry and classify(denied).problem.startswith("access denied")
    assert classify(Exception("GET http://127.0.0.1:41234/traj/x.h5md - status code: 503 SlowDown")).retry
    # a missing object whose request took 412 ms is no replaced one (seen: one run in a few)
    class NotFoundError(Exception):
        pass

    missing = NotFoundError("Object at location missing.h5 not found: Error performing GET "
                            "http://127.0.0.1:41234/ml-data/missing.h5 in 412ms - Server returned non-2xx status "
                            "code: 404 Not Found: <Error><Code>NoSuchKey</Code></Error>")
    assert not classify(missing).retry and classify(missing).problem.startswith("no such object")
    took_404ms = Exception("GET took 404ms - status code: 412 Precondition Failed")
    assert classify(took_404ms).problem.startswith("the object was")
