"""Storage options given only as ``storage_options`` (no environment names the server) reach every process that
reads: a run's workers on processes and Dask, an ensemble's members prepared there, and a Location pickled to
another process. The numbers are those of the same files read locally, bit for bit."""

from __future__ import annotations

import importlib.util
import pickle

import numpy as np
import pytest

if not all(importlib.util.find_spec(m) for m in ("obstore", "moto", "flask")):   # looked up, not imported
    pytest.skip("obstore and moto[server] are not installed", allow_module_level=True)

import trajscale as ts  # noqa: E402
from tests.remote.conftest import BUCKET, CREDENTIALS, s3_env, s3_server  # noqa: E402,F401 - the session's server

pytestmark = pytest.mark.remote

NAMES = ("adk-0", "adk-2", "yiip-0")


@pytest.fixture
def only_options(replicas, s3_env, monkeypatch):  # noqa: F811 - the imported fixture
    """The ensemble uploaded under ``s3://traj/travel``, then an environment that names no server nor key: the
    options that reach it are the ones returned, given as ``storage_options`` only."""
    client = s3_env.client()
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    lines = ["name,topology,trajectory"]
    for name in NAMES:
        top, xtc, _ = replicas["members"][name]
        client.upload_file(xtc, BUCKET, f"travel/{name}.xtc")
        lines.append(f"{name},{top},{name}.xtc")
    client.put_object(Bucket=BUCKET, Key="travel/catalog.csv", Body=("\n".join(lines) + "\n").encode())
    for k in (*s3_env.env, "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")   # (no profile supplies a key either)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    return {"endpoint_url": s3_env.endpoint, "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "region": "us-east-1", "retry_seconds": 5}


def test_without_the_options_the_server_is_not_reached(only_options):
    # the check the others stand on: the environment alone names no server
    from trajscale.errors import TrajscaleError

    with pytest.raises(TrajscaleError):
        ts.Location(f"s3://{BUCKET}/travel/adk-0.xtc", {"retry_seconds": 1}).size   # noqa: B018


def test_a_location_pickles_small_and_reads_with_its_own_options(only_options, replicas):
    loc = ts.Location(f"s3://{BUCKET}/travel/adk-0.xtc", only_options)
    again = pickle.loads(pickle.dumps(loc))
    assert again == loc and dict(again.options) == only_options
    assert len(pickle.dumps(loc)) < 600   # where and options: no client, no store
    with open(replicas["members"]["adk-0"][1], "rb") as f:
        assert again.read() == f.read()


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["processes", "dask"])
def test_an_ensemble_reads_with_options_given_only_to_the_run(only_options, replicas, executor):
    remote = ts.run(ts.RMSD(select="name CA"), f"s3://{BUCKET}/travel/catalog.csv", executor=executor,
                    n_workers=2, storage_options=only_options)
    local = ts.run(ts.RMSD(select="name CA"), ts.Ensemble.from_catalog(replicas["catalog"]))
    assert remote.names == NAMES and not remote.refused
    for name in NAMES:
        assert np.array_equal(remote[name].rmsd, local[name].rmsd)


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["processes", "dask"])
def test_one_trajectory_reads_with_options_given_only_to_the_run(only_options, replicas, executor):
    top, xtc, _ = replicas["members"]["adk-0"]
    remote = ts.run(ts.RMSD(select="name CA"), top, f"s3://{BUCKET}/travel/adk-0.xtc", executor=executor,
                    n_workers=2, storage_options=only_options)
    local = ts.run(ts.RMSD(select="name CA"), top, xtc)
    assert np.array_equal(remote.rmsd, local.rmsd)


@pytest.mark.parametrize("executor", ["serial", "threads"])
def test_later_rounds_read_with_the_run_options(only_options, replicas, executor):
    # a round is prepared in another thread while the one before runs: the options go with its locations
    remote = ts.run(ts.RMSD(select="name CA"), f"s3://{BUCKET}/travel/catalog.csv", executor=executor,
                    n_workers=2, round_size=1, storage_options=only_options)
    local = ts.run(ts.RMSD(select="name CA"), ts.Ensemble.from_catalog(replicas["catalog"]))
    assert remote.names == NAMES and not remote.refused
    for name in NAMES:
        assert np.array_equal(remote[name].rmsd, local[name].rmsd)
