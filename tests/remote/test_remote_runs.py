"""Trajectories behind URLs, read from a real S3 server: the same bytes as the local file, on every
executor, and every failure refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.conftest import mpiexec, run_cli, run_cli_here

from .conftest import BUCKET, CREDENTIALS, TPR, XTC, upload_segments

pytestmark = pytest.mark.remote

SELECT = ["--select", "name CA"]


def _run(server, tmp_path, name, traj, *extra):
    """``trajscale run rmsd`` of ``traj``: in this process, or in its own where it starts a pool of processes
    (which this process, with the server's threads, would start by a forkserver)."""
    out = tmp_path / f"{name}.csv"
    argv = ("run", "rmsd", TPR, traj, "--out", str(out), *SELECT, *extra)
    pool = "processes" in extra or "dask" in extra
    proc = run_cli(*argv, env=server.subprocess_env()) if pool else run_cli_here(*argv, env=server.subprocess_env())
    return proc, out


#: A local file's CSV by the file's path: the tests compare their URLs' runs with the same few local runs,
#: each a serial process (about 1.5 s of CPU), run once per file in this module instead of once per test.
_LOCAL_CSV: dict[str, bytes] = {}


def _local_csv(server, tmp_path, local):
    if local not in _LOCAL_CSV:
        proc, out = _run(server, tmp_path, "local", local, "--executor", "serial", "--overwrite")
        assert proc.returncode == 0, proc.stderr
        _LOCAL_CSV[local] = out.read_bytes()
    return _LOCAL_CSV[local]


@pytest.mark.parametrize("store", ["plain", "gzip", "lossy"])
def test_serial_run_from_s3_equals_the_local_file(s3_server, adk_stores, tmp_path, store):
    local, url, _ = adk_stores[store]
    proc, out = _run(s3_server, tmp_path, "remote", url, "--executor", "serial", "--report",
                     str(tmp_path / "report.json"))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == _local_csv(s3_server, tmp_path, local)
    report = json.loads((tmp_path / "report.json").read_text())
    tasks = report["tasks"]
    assert sum(t["requests"] for t in tasks) >= 1 and sum(t["bytes_fetched"] for t in tasks) > 0
    assert all(t["retries"] == 0 for t in tasks)
    assert report["source"]["path"] == url   # the URL, in the report and its advice, never a file object's repr
    assert "object at 0x" not in proc.stdout + proc.stderr


def test_the_advice_knows_a_request_per_frame_costs(s3_server, adk_stores, tmp_path):
    """Compressed one-frame chunks read every third frame: a request per frame, and the advice says how many."""
    local, url, _ = adk_stores["frame_gzip"]
    report = tmp_path / "report.json"
    proc, out = _run(s3_server, tmp_path, "remote", url, "--step", "3", "--report", str(report))
    assert proc.returncode == 0, proc.stderr
    here, _ = _run(s3_server, tmp_path, "local", local, "--step", "3")
    assert here.returncode == 0, here.stderr
    assert out.read_bytes() == (tmp_path / "local.csv").read_bytes()
    d = json.loads(report.read_text())
    frames = sum(len(range(t["start"], t["stop"], t["stride"])) for t in d["tasks"])
    assert frames == 4 and sum(t["requests"] for t in d["tasks"]) >= frames
    advice = {a["rule"]: a for a in d["diagnosis"]["advice"]}["remote-requests"]
    assert advice["message"].startswith("one-frame chunks cost one request per frame: rechunk to 7 frames per chunk")
    assert f"trajscale rechunk {url} -o adk_frame_gzip.remote.h5md --layout remote" in advice["message"]


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.parametrize("executor", ["processes", "threads", "dask"])
def test_pool_runs_from_s3_equal_the_local_file(s3_server, adk_stores, tmp_path, executor):
    local, url, _ = adk_stores["gzip" if executor != "dask" else "plain"]
    proc, out = _run(s3_server, tmp_path, "remote", url, "--executor", executor, "-n", "2", "--tasks", "4")
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == _local_csv(s3_server, tmp_path, local)


@pytest.mark.cli
@pytest.mark.mpi
@pytest.mark.slow
def test_mpi_run_from_s3_equals_the_local_file(s3_server, adk_stores, tmp_path):
    local, url, _ = adk_stores["gzip"]
    out = tmp_path / "mpi.csv"
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", TPR, url, "--out",
           str(out), "--executor", "mpi", *SELECT]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=s3_server.subprocess_env())
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == _local_csv(s3_server, tmp_path, local)


def test_http_url_of_a_public_object_equals_the_local_file(s3_server, adk_stores, tmp_path):
    local, _, http = adk_stores["plain"]
    env = {k: v for k, v in s3_server.subprocess_env().items() if not k.startswith("AWS_")}   # no credentials
    out = tmp_path / "http.csv"
    proc = run_cli_here("run", "rmsd", TPR, http, "--out", str(out), *SELECT, env=env)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == _local_csv(s3_server, tmp_path, local)


def test_inspect_verify_and_convert_read_a_url(s3_server, adk_stores, tmp_path):
    local, url, _ = adk_stores["gzip"]
    env = s3_server.subprocess_env()
    shown = run_cli_here("inspect", url, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    facts = json.loads(shown.stdout)
    assert facts["n_frames"] == 10 and facts["n_atoms"] == 47681
    size = os.path.getsize(local)   # the object's size, from its identity: the uploaded file's
    assert facts["file_bytes"] == size and 0 <= facts["unused_bytes"] < size
    text = run_cli_here("inspect", url, env=env)
    assert text.returncode == 0 and f"{url}  ({size / 1e6:.1f} MB" in text.stdout, text.stdout + text.stderr
    checked = run_cli_here("verify", TPR, XTC, url, env=env)
    assert checked.returncode == 0, checked.stderr
    copy = tmp_path / "copy.h5md"
    made = run_cli_here("convert", TPR, url, "-o", str(copy), env=env)
    assert made.returncode == 0, made.stderr
    with h5py.File(copy) as a, h5py.File(local) as b:
        path = "particles/all/position/value"
        assert np.array_equal(a[path][()], b[path][()])


def test_open_dataset_of_a_url_gives_the_local_arrays(s3_env, adk_stores):
    import trajscale

    for store in ("plain", "gzip", "lossy"):
        local, url, _ = adk_stores[store]
        ds = trajscale.open_dataset(None, url)
        with h5py.File(local) as f:   # h5py on the local copy: the reference
            raw = f["particles/all/position/value"]
            if store != "lossy":
                assert np.array_equal(ds.positions.values, raw[()])
        assert np.array_equal(ds.positions.values, trajscale.open_dataset(None, local).positions.values)


def test_the_mpi_prediction_has_ranks_open_a_url_alone(s3_env, adk_stores):
    """The model a report predicts MPI runs from: ranks open a local H5MD file together (MPI-IO, a cost per
    rank), and one behind a URL each alone, by requests (no collective open to cost)."""
    from trajscale import RMSD, run
    from trajscale.report.fit import fit

    local, url, _ = adk_stores["plain"]
    assert fit(run(RMSD(select="name CA"), TPR, local, executor="serial").report, "mpi").collective_open
    assert not fit(run(RMSD(select="name CA"), TPR, url, executor="serial").report, "mpi").collective_open


def test_workers_read_by_the_chunk_index_and_a_replaced_object_is_refused(s3_env, adk_stores):
    """A worker's source comes from the root's config: chunk addresses and the object's identity with it;
    the object replaced between the root's look and the worker's read is refused, never mixed."""
    from trajscale.sources import open_source, source_from_config
    from trajscale.storage.retry import Replaced

    local, url, _ = adk_stores["gzip"]
    client = s3_env.client()
    client.upload_file(local, BUCKET, "victim.h5md")
    victim = f"s3://{BUCKET}/victim.h5md"
    root = open_source(victim)
    config = root.get_config()
    root.close()
    assert config["identity"][1] == os.path.getsize(local) and config["chunk_index"]["position"]["filtered"]
    worker = source_from_config(config)
    with h5py.File(local) as f:
        assert np.array_equal(worker.read(0, 4).positions, f["particles/all/position/value"][0:4])
    worker.close()
    client.upload_file(adk_stores["plain"][0], BUCKET, "victim.h5md")   # replaced: another ETag and size
    with pytest.raises(Replaced, match="replaced during the run"):   # on opening, or on reading
        source_from_config(config).read(4, 8)


@pytest.mark.parametrize("url, problem", [(f"s3://{BUCKET}/missing.h5md", "no such object"),
                                          ("s3://no-such-bucket/adk.h5md", "no such bucket")])
def test_a_missing_object_or_bucket_is_one_line(s3_server, adk_stores, tmp_path, url, problem):
    proc, out = _run(s3_server, tmp_path, "x", url)
    assert proc.returncode != 0 and not out.exists()
    assert proc.stderr.strip() == f"trajscale run: error: {url}: {problem} (the key does not exist)" \
        if problem == "no such object" else proc.stderr.strip() == f"trajscale run: error: {url}: {problem}"


def test_a_wrong_endpoint_ends_in_bounded_time_in_one_line(s3_server, adk_stores, tmp_path):
    from .conftest import free_port

    _, url, _ = adk_stores["plain"]
    t0 = time.monotonic()
    proc, out = _run(s3_server, tmp_path, "x", url, "--storage-option", f"endpoint_url=http://127.0.0.1:{free_port()}",
                     "--storage-option", "retry_seconds=2")
    assert time.monotonic() - t0 < 120
    assert proc.returncode == 9 and not out.exists(), proc.stderr   # (the server's failure: its own status)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"trajscale run: error: s3://{BUCKET}: did not answer in 2 s")
    assert "endpoint http://127.0.0.1:" in lines[0] and "Traceback" not in proc.stderr


def test_credentials_never_appear_in_the_report_or_the_log(s3_server, adk_stores, tmp_path):
    _, url, _ = adk_stores["plain"]
    given = "given-secret-on-the-command-line"
    report = tmp_path / "report.json"
    proc, out = _run(s3_server, tmp_path, "x", url, "-v", "--report", str(report),
                     "--storage-option", f"key={CREDENTIALS['AWS_ACCESS_KEY_ID']}",
                     "--storage-option", f"secret={given}")
    assert proc.returncode == 0, proc.stderr
    for secret in (given, CREDENTIALS["AWS_SECRET_ACCESS_KEY"]):
        for text in (report.read_text(), proc.stderr, proc.stdout, out.read_text()):
            assert secret not in text


def test_a_url_of_a_format_read_from_disk_only_is_one_line(s3_server, adk_stores, tmp_path):
    dcd = str(Path(XTC).parent / "adk_dims.dcd")
    s3_server.client().upload_file(dcd, BUCKET, "adk.dcd")
    proc, out = _run(s3_server, tmp_path, "x", f"s3://{BUCKET}/adk.dcd")
    assert proc.returncode != 0 and not out.exists()
    assert proc.stderr.strip() == (f"trajscale run: error: s3://{BUCKET}/adk.dcd: DCD files are read from a "
                                   "local disk only (from a URL: segment indexes, MDCATH, H5MD, XTC, TRR); "
                                   "download it first")


# -- faults mid-run, each on a server of the test's own

_ON_FIRST_FRAME = []


def _first_frames_do(positions, box=None):
    while _ON_FIRST_FRAME:   # once, on the first block the run maps
        _ON_FIRST_FRAME.pop()()
    return positions[:, :, 0].mean(axis=1)


def _run_with_fault(server, local, fault):
    """trajscale.run over the object on ``server``, one frame per block; ``fault(client)`` runs when the
    first block has been read. Returns the exception the run raised and how long it took."""
    import trajscale
    from trajscale.analysis.user import PerFrame, per_frame

    fn = per_frame(_first_frames_do)
    client = server.client()
    client.create_bucket(Bucket=BUCKET)
    client.upload_file(local, BUCKET, "victim.h5md")
    _ON_FIRST_FRAME.append(lambda: fault(client))
    t0 = time.monotonic()
    with pytest.raises(trajscale.errors.TrajscaleError) as caught:
        trajscale.run(PerFrame(fn, select="all"), TPR, f"s3://{BUCKET}/victim.h5md", executor="serial",
                      max_block_bytes=600_000, storage_options={"endpoint_url": server.endpoint,
                                                                "retry_seconds": 3})
    _ON_FIRST_FRAME.clear()
    return caught.value, time.monotonic() - t0


@pytest.mark.cli
def test_a_server_stopped_mid_run_ends_it_in_bounded_time(own_server, adk_stores, monkeypatch):
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    srv = own_server()
    exc, took = _run_with_fault(srv.server, adk_stores["plain"][0], lambda client: srv.stop())
    from trajscale.errors import ServerUnreachable

    assert isinstance(exc, ServerUnreachable) and str(exc).startswith(f"s3://{BUCKET}: did not answer in 3 s"), exc
    assert took < 120


@pytest.mark.cli
@pytest.mark.parametrize("fault, problem", [("overwrite", "replaced during the run"),
                                            ("delete", "replaced or removed during the run")])
def test_an_object_replaced_or_deleted_mid_run_is_refused(own_server, adk_stores, monkeypatch, fault, problem):
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    srv = own_server()
    other = adk_stores["gzip"][0]

    def act(client):
        if fault == "overwrite":
            client.upload_file(other, BUCKET, "victim.h5md")
        else:
            client.delete_object(Bucket=BUCKET, Key="victim.h5md")

    exc, _ = _run_with_fault(srv.server, adk_stores["plain"][0], act)
    assert problem in str(exc)


def _server_checking_keys(own_server, adk_stores):
    """A moto server of the test's own with IAM on, a user allowed every S3 action, and AdK's plain store
    uploaded as ``s3://traj/adk.h5md``: (the server, the user's access key)."""
    srv = own_server({"INITIAL_NO_AUTH_ACTION_COUNT": "3"})
    import boto3

    iam = boto3.client("iam", endpoint_url=srv.server.endpoint, region_name="us-east-1",
                       aws_access_key_id="setup", aws_secret_access_key="setup")
    iam.create_user(UserName="reader")
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    client = srv.server.client(aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
    client.create_bucket(Bucket=BUCKET)
    client.upload_file(adk_stores["plain"][0], BUCKET, "adk.h5md")
    return srv, key


@pytest.mark.cli
@pytest.mark.slow
def test_an_aws_profile_gives_the_credentials(own_server, adk_stores, tmp_path):
    """A server that checks credentials (moto with IAM on), and no key in the environment: the key of a profile
    in the shared credentials file is used, named by ``AWS_PROFILE``, by ``--storage-option profile=``, or as
    the file's default; the CSV is the local file's. Without a profile that holds it: access denied in one line;
    a profile that does not exist: one line naming it."""
    srv, key = _server_checking_keys(own_server, adk_stores)
    local = adk_stores["plain"][0]
    shared = tmp_path / "credentials"
    base = {k: v for k, v in srv.server.subprocess_env().items()
            if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")}
    base.update(AWS_SHARED_CREDENTIALS_FILE=str(shared), AWS_CONFIG_FILE=str(tmp_path / "config"), HOME=str(tmp_path))
    want = _local_csv(srv.server, tmp_path, local)
    url = f"s3://{BUCKET}/adk.h5md"

    def run(profile_text: str, *extra: str, **env: str) -> subprocess.CompletedProcess:
        shared.write_text(profile_text)
        out = tmp_path / "remote.csv"
        out.unlink(missing_ok=True)
        proc = run_cli("run", "rmsd", TPR, url, "--out", str(out), *SELECT, *extra, env={**base, **env})
        if proc.returncode == 0:
            assert out.read_bytes() == want
        return proc

    lab = f"[lab]\naws_access_key_id = {key['AccessKeyId']}\naws_secret_access_key = {key['SecretAccessKey']}\n"
    assert run(lab, AWS_PROFILE="lab").returncode == 0
    assert run(lab, "--storage-option", "profile=lab").returncode == 0
    assert run(lab.replace("[lab]", "[default]")).returncode == 0
    denied = run(lab)   # the key is in a profile no one names
    assert denied.returncode != 0
    assert denied.stderr.strip().splitlines() == [f"trajscale run: error: {url}: access denied "
                                                  "(the credentials may not read this object)"], denied.stderr
    missing = run(lab, AWS_PROFILE="nosuch")
    lines = missing.stderr.strip().splitlines()
    assert missing.returncode != 0 and len(lines) == 1 and "'nosuch'" in lines[0], missing.stderr
    assert key["SecretAccessKey"] not in denied.stderr + missing.stderr


@pytest.mark.cli
def test_wrong_credentials_are_one_line(own_server, adk_stores, tmp_path):
    """A server that checks credentials (moto with IAM on): a key it does not know is refused in one line."""
    srv, _ = _server_checking_keys(own_server, adk_stores)
    env = {**srv.server.subprocess_env(), "AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG1",
           "AWS_SECRET_ACCESS_KEY": "wrong-secret-never-printed"}
    out = tmp_path / "x.csv"
    proc = run_cli_here("run", "rmsd", TPR, f"s3://{BUCKET}/adk.h5md", "--out", str(out), *SELECT, env=env)
    assert proc.returncode != 0 and not out.exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"trajscale run: error: s3://{BUCKET}/adk.h5md: access denied")
    assert "wrong-secret-never-printed" not in proc.stderr


@pytest.mark.cli
@pytest.mark.slow
def test_a_segment_index_behind_a_url_reads_its_parts_beside_it(s3_server, adk_stores, tmp_path):
    """An index and its parts uploaded together: the parts are found relative to the index's URL."""
    local, _, _ = adk_stores["plain"]
    folder = tmp_path / "segs"
    index = upload_segments(s3_server, local, folder, "segs")
    report = tmp_path / "report.json"
    proc, out = _run(s3_server, tmp_path, "remote", index, "--executor", "processes",
                     "-n", "2", "--report", str(report))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == _local_csv(s3_server, tmp_path, str(folder / "index.json"))
    assert out.read_bytes() == _local_csv(s3_server, tmp_path, local)
    assert sum(t["requests"] for t in json.loads(report.read_text())["tasks"]) > 0


def test_an_output_url_is_refused_before_any_work(s3_server, adk_stores, tmp_path):
    _, url, _ = adk_stores["plain"]
    proc = run_cli_here("convert", TPR, XTC, "-o", f"s3://{BUCKET}/new.h5md", env=s3_server.subprocess_env())
    assert proc.returncode != 0
    assert proc.stderr.strip() == (f"trajscale convert: error: s3://{BUCKET}/new.h5md: outputs are written to "
                                   "local paths: write it here, then upload the finished file (e.g. `aws s3 cp "
                                   "FILE URL`, `aws s3 cp --recursive DIR URL` for a folder), which the store "
                                   "shows under its key only when complete")
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert "new.h5md" not in keys


@pytest.mark.parametrize("how", ["slowdown", "reset"])
def test_throttling_and_dropped_connections_are_retried_and_counted(s3_server, adk_stores, tmp_path, how):
    """A proxy answers the first try of each range request with 503 SlowDown (or drops it): the run retries
    them with backoff, counts them in its report, and gives the local file's numbers."""
    from .conftest import FlakyProxy

    local, url, _ = adk_stores["gzip"]
    proxy = FlakyProxy(s3_server.endpoint, failures=1000, how=how)
    try:
        report = tmp_path / "report.json"
        proc, out = _run(s3_server, tmp_path, "remote", url, "--storage-option", f"endpoint_url={proxy.endpoint}",
                         "--report", str(report))
    finally:
        proxy.close()
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == _local_csv(s3_server, tmp_path, local)
    tasks = json.loads(report.read_text())["tasks"]
    assert sum(t["retries"] for t in tasks) >= sum(t["requests"] for t in tasks) / 2 > 0
    assert "retries" in proc.stdout


def test_mdanalysis_reads_a_url_through_format_trajscale(s3_env, adk_stores):
    import MDAnalysis as mda

    import trajscale.mda  # noqa: F401 - registers format TRAJSCALE

    local, url, _ = adk_stores["gzip"]
    u = mda.Universe(TPR, url, format="TRAJSCALE")
    assert len(u.trajectory) == 10
    with h5py.File(local) as f:   # h5py on the local copy: the reference
        raw = f["particles/all/position/value"]
        for ts in u.trajectory[::3]:
            assert np.array_equal(ts.positions, raw[ts.frame])


def test_following_a_url_is_refused_in_one_line(s3_server, adk_stores, tmp_path):
    _, url, _ = adk_stores["plain"]
    proc, out = _run(s3_server, tmp_path, "x", url, "--follow", "--idle", "2")
    assert proc.returncode != 0 and not out.exists()
    assert proc.stderr.strip() == (f"trajscale run: error: {url}: a trajectory behind a URL is read finished; "
                                   "following is for files a job is writing (run without --follow)")


def test_a_selection_fetches_about_the_bytes_a_local_run_reads(s3_server, adk_stores, tmp_path):
    """A CA selection is a 40 kB span of each 572 kB AdK frame (uncompressed): the reader fetches those
    spans, within 1.2x the bytes the same run reads from the local file, not the frames whole (the bytes
    between spans cost more than the concurrent requests they would save), in about one request a frame."""
    local, url, _ = adk_stores["plain"]
    got = {}
    for where, traj, extra in (("local", local, ()), ("remote", url, ()),
                               ("merged", url, ("--storage-option", f"merge_gap={1024**2}"))):
        report = tmp_path / f"{where}.json"
        proc, out = _run(s3_server, tmp_path, where, traj, "--executor", "serial", "--report", str(report), *extra)
        assert proc.returncode == 0, proc.stderr
        assert out.read_bytes() == (tmp_path / "local.csv").read_bytes()
        got[where] = json.loads(report.read_text())["tasks"]
    read_here = sum(t["bytes_read"] for t in got["local"])
    fetched = sum(t["bytes_fetched"] for t in got["remote"])
    frames = sum(len(range(t["start"], t["stop"], t["stride"])) for t in got["remote"])
    assert frames == 10 and read_here > 0
    assert fetched <= 1.2 * read_here, (fetched, read_here)
    assert sum(t["requests"] for t in got["remote"]) <= 2 * frames + 4   # still few: about one per frame
    # the option reaches the reader: ranges merged across 1 MiB fetch the frames whole (what it did before)
    assert sum(t["bytes_fetched"] for t in got["merged"]) > 10 * read_here
