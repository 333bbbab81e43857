"""Faults of a real S3 server (moto's, through :class:`~tests.remote.conftest.FlakyProxy` where one is injected):
answers that look fine but are not (a short body, a longer one, a whole object for a range, 5xx), a region
the server does not have, a server that dies mid-run. Each is retried or refused in one line naming the URL;
a run that ends gives the local file's numbers, byte for byte, and a run that fails leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import run_cli_here

from .conftest import BUCKET, TPR, FlakyProxy

pytestmark = pytest.mark.remote

SELECT = ["--select", "name CA"]
#: Seconds a failed run may take, all told, on a loaded machine (it gives up after ``retry_seconds``).
BOUNDED = 120


@pytest.fixture(scope="module")
def local_csv(s3_server, adk_stores, tmp_path_factory):
    """The CSV of the same run on the local copy of the plain store: what every run from the server must equal."""
    out = tmp_path_factory.mktemp("faults-local") / "local.csv"
    proc = run_cli_here("run", "rmsd", TPR, adk_stores["plain"][0], "--out", str(out), *SELECT, "--executor",
                        "serial", env=s3_server.subprocess_env())
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


def _through(proxy, url, folder, *extra, env=None, server=None):
    """``trajscale run rmsd`` of ``url`` through ``proxy`` with --out and --report in ``folder``, in this process:
    (its exit status and output, the CSV's path, the report's path, seconds it took)."""
    folder.mkdir(exist_ok=True)
    out, report = folder / "remote.csv", folder / "report.json"
    t0 = time.monotonic()
    proc = run_cli_here("run", "rmsd", TPR, url, "--out", str(out), "--report", str(report), *SELECT,
                        "--executor", "serial", "--storage-option", f"endpoint_url={proxy.endpoint}", *extra,
                        env=env or server.subprocess_env())
    return proc, out, report, time.monotonic() - t0


def _one_line(proc, url, took, folder):
    """The run failed in one line naming ``url``, without a traceback, in bounded time, leaving nothing in
    ``folder`` (no results, no report, no temporary file)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"trajscale run: error: {url}: "), lines
    assert took < BOUNDED, took
    assert sorted(p.name for p in folder.iterdir()) == [], list(folder.iterdir())


# -- answers that look fine but are not, on the first try of each range: retried, counted, never used

@pytest.mark.parametrize("how, status", [("short", None), ("long", None), ("status", 500), ("status", 502)],
                         ids=["short", "long", "500", "502"])
def test_a_spoiled_first_answer_is_retried_and_never_used(s3_server, adk_stores, local_csv, tmp_path, how, status):
    """The first try of every range request is answered wrongly: ``short``, half the bytes asked (with a
    Content-Length that matches what is sent, so the client sees a complete answer); ``long``, the bytes asked
    with 4 kB of the object's before and after them, said to be the range asked for; ``500`` (S3's
    InternalError) or ``502`` (a load balancer's Bad Gateway page). Each is retried: the report counts the
    retries, and the CSV is the local file's byte for byte (a spoiled body used as it came would shift or cut
    the plain store's coordinates: wrong numbers, or a failed read)."""
    _, url, _ = adk_stores["plain"]
    proxy = FlakyProxy(s3_server.endpoint, failures=10**6, how=how, status=status or 500)
    try:
        proc, out, report, _ = _through(proxy, url, tmp_path / "run", server=s3_server)
    finally:
        proxy.close()
    assert proc.returncode == 0, proc.stderr
    assert proxy.faults["n"] > 0
    assert out.read_bytes() == local_csv
    tasks = json.loads(report.read_text())["tasks"]
    assert sum(t["retries"] for t in tasks) > 0 and sum(t["requests"] for t in tasks) > 0
    assert "retries" in proc.stdout


@pytest.mark.parametrize("how, status", [("short", None), ("long", None), ("status", 500)],
                         ids=["short", "long", "500"])
def test_a_spoiled_answer_on_every_try_ends_the_run_in_one_line(s3_server, adk_stores, tmp_path, how, status):
    """Every try of every range answered wrongly (a short body, a long one, 500): the run gives up after
    ``retry_seconds`` (2 s) as the server's failure (its own exit status), in one line naming the server and
    the last problem, no traceback, nothing under the output's or the report's name."""
    _, url, _ = adk_stores["plain"]
    proxy = FlakyProxy(s3_server.endpoint, failures=10**9, how=how, status=status or 500, every_try=True)
    try:
        proc, _, _, took = _through(proxy, url, tmp_path / "run", "--storage-option", "retry_seconds=2",
                                    server=s3_server)
    finally:
        proxy.close()
    _one_line(proc, f"s3://{BUCKET}", took, tmp_path / "run")
    assert proc.returncode == 9, proc.stderr
    assert proxy.faults["n"] > 1   # tried again before giving up
    assert "2 s" in proc.stderr   # the time it was given
    if how == "status":   # the server's own words, not its XML cut mid-tag
        assert "InternalError" in proc.stderr and "<" not in proc.stderr, proc.stderr
    else:   # it answered, wrongly: said so, in the user's terms
        assert "gave no usable answer in 2 s" in proc.stderr and "bytes for" in proc.stderr, proc.stderr
        assert "_Retry" not in proc.stderr and "short response" not in proc.stderr


@pytest.mark.parametrize("every_try", [False, True], ids=["first-try", "every-try"])
def test_a_whole_object_for_a_range_is_never_used(s3_server, adk_stores, local_csv, tmp_path, every_try):
    """A server that ignores Range (200 and the whole object, as some HTTP servers and caches do) for the first
    try of each range, or for every try: the bytes are never used as the range's. obstore refuses a full
    answer to a range request ("Received non-partial response when range requested") and the run ends at
    once in one line naming the URL; should a later client retry it instead, the run must still end with
    the local file's numbers, or in one line: never with a wrong number."""
    _, url, _ = adk_stores["plain"]
    proxy = FlakyProxy(s3_server.endpoint, failures=10**9, how="whole", every_try=every_try)
    try:
        proc, out, _, took = _through(proxy, url, tmp_path / "run", "--storage-option", "retry_seconds=2",
                                      server=s3_server)
    finally:
        proxy.close()
    assert proxy.faults["n"] > 0
    if proc.returncode == 0:
        assert not every_try, "a run read only whole objects for ranges and called it done"
        assert out.read_bytes() == local_csv
    else:
        _one_line(proc, url, took, tmp_path / "run")


# -- a region the server does not have

@pytest.mark.parametrize("where", ["option", "environment"])
def test_another_region_than_the_servers(s3_server, adk_stores, local_csv, tmp_path, where):
    """The bucket was made in us-east-1; the run says eu-west-3 (``--storage-option region_name=eu-west-3``,
    or AWS_DEFAULT_REGION/AWS_REGION). Against an endpoint given by URL the region only goes into the request's
    signature, and moto (without IAM) checks no signature, so the run reads the object and gives the local
    file's numbers (what real S3 does with a wrong region, a redirect or an error, cannot be seen here)."""
    _, url, _ = adk_stores["plain"]
    env = s3_server.subprocess_env()
    extra = []
    if where == "option":
        extra = ["--storage-option", "region_name=eu-west-3"]
    else:
        env = {**env, "AWS_DEFAULT_REGION": "eu-west-3", "AWS_REGION": "eu-west-3"}
    proxy = FlakyProxy(s3_server.endpoint, failures=0)   # faults none: it only sees the requests
    try:
        proc, out, _, _ = _through(proxy, url, tmp_path / "run", *extra, "--storage-option", "retry_seconds=5",
                                   env=env)
    finally:
        proxy.close()
    assert proxy.gets, "the run asked the server nothing"
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == local_csv


# -- a server that dies mid-run

def _past_head(asked: str | None) -> bool:
    """A range request for bytes past the object's first 256 kB (what the head request fetches): a frame's."""
    return bool(asked) and int(asked.partition("=")[2].partition("-")[0]) >= 256 * 1024


@pytest.mark.cli
@pytest.mark.slow   # about 8 s, most of it waiting on held requests and retries
def test_a_server_that_dies_mid_run_leaves_no_results_and_no_report(own_server, adk_stores, tmp_path):
    """A server of the test's own, behind a proxy that holds every range request 1 s, killed as soon as the
    run asks for a frame's bytes (a range past the object's first 256 kB, the head request's), while that
    request is held: the run ends within ``retry_seconds`` (3 s) of it and a start-up's time, in one line
    naming the server, its own exit status, no traceback; nothing exists under the --out name or the --report name,
    and no temporary file beside them."""
    local, _, _ = adk_stores["plain"]
    srv = own_server()
    client = srv.server.client()
    client.create_bucket(Bucket=BUCKET)
    client.upload_file(local, BUCKET, "dies.h5md")
    url = f"s3://{BUCKET}/dies.h5md"
    proxy = FlakyProxy(srv.server.endpoint, failures=0, hold=1.0)
    folder = tmp_path / "run"
    folder.mkdir()
    out, report = folder / "remote.csv", folder / "report.json"
    cmd = [sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", TPR, url, "--out", str(out), "--report",
           str(report), *SELECT, "--executor", "serial", "--max-block-mb", "0.6", "--storage-option",
           f"endpoint_url={proxy.endpoint}", "--storage-option", "retry_seconds=3"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=srv.server.subprocess_env())
    try:
        end = time.monotonic() + BOUNDED
        while not any(_past_head(r) for _, r in list(proxy.gets)) and proc.poll() is None \
                and time.monotonic() < end:
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before the server was stopped: " + proc.communicate()[1]
        assert any(_past_head(r) for _, r in proxy.gets), "the run asked for no frame's bytes"
        srv.stop()
        stopped = time.monotonic()
        stdout, stderr = proc.communicate(timeout=BOUNDED)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        proxy.close()
    done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    _one_line(done, f"s3://{BUCKET}", took, folder)   # (the server's failure, no file's: its own exit status)
    assert proc.returncode == 9, stderr
    assert "did not answer in 3 s" in stderr, stderr
