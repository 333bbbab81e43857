"""``benchmarks/remote.py --pairs``: two rows timed as whole processes in turn, at the smoke size."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.remote, pytest.mark.tool, pytest.mark.cli, pytest.mark.slow]


def test_pairs_time_two_rows_in_turn_and_give_the_medians(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "remote.py"), "--smoke", "--workdir",
                           str(tmp_path), "--pairs", "rmsd-serial-default-url:rmsd-serial-default-local",
                           "--repeat", "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    num = r"[\d.]+"
    assert re.search(rf"^A rmsd-serial-default-url  B rmsd-serial-default-local: A {num} s, B {num} s, "
                     rf"A/B {num} \(pairs: {num} {num}; load {num} -> {num}\)$", proc.stdout, re.M), proc.stdout
    got = json.loads((tmp_path / "pairs.json").read_text())
    assert len(got) == 1 and len(got[0]["ratios"]) == 2
    assert got[0]["ratio"] == pytest.approx(sorted(got[0]["ratios"])[0] / 2 + sorted(got[0]["ratios"])[1] / 2)
    assert (tmp_path / "commands" / "rmsd-serial-default-url.csv").read_bytes() == \
        (tmp_path / "commands" / "rmsd-serial-default-local.csv").read_bytes()


def _benchmark_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("remote_benchmark", ROOT / "benchmarks" / "remote.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_servers_front_answers_simple_ranges_as_moto_does():
    """The benchmark's server answers a simple range GET from its front (the bytes, ETag and If-Match of
    the object moto holds), and leaves moto every other request: a wrong ETag, a range past the end."""
    import os

    from botocore.exceptions import ClientError

    bench = _benchmark_module()
    body = os.urandom(300_000)
    got = {}
    for dispatch in (False, True):
        server = bench.Server(dispatch=dispatch)
        try:
            s3 = __import__("boto3").client("s3", endpoint_url=server.url, aws_access_key_id=bench.KEY_ID,
                                            aws_secret_access_key=bench.SECRET, region_name="us-east-1")
            s3.create_bucket(Bucket="bench-bucket")
            s3.put_object(Bucket="bench-bucket", Key="dir/obj.h5md", Body=body)
            etag = s3.head_object(Bucket="bench-bucket", Key="dir/obj.h5md")["ETag"]
            answers = []
            for rng in ("bytes=1000-40999", "bytes=299990-", "bytes=299990-400000"):
                r = s3.get_object(Bucket="bench-bucket", Key="dir/obj.h5md", Range=rng, IfMatch=etag)
                headers = r["ResponseMetadata"]["HTTPHeaders"]
                answers.append((r["Body"].read(), r["ETag"], r["ContentRange"], r["LastModified"],
                                headers.get(bench.FRONT_HEADER)))
            got[dispatch] = answers
            with pytest.raises(ClientError) as exc:
                s3.get_object(Bucket="bench-bucket", Key="dir/obj.h5md", Range="bytes=0-9", IfMatch='"0123"')
            assert exc.value.response["Error"]["Code"] == "PreconditionFailed"
            with pytest.raises(ClientError) as exc:
                s3.get_object(Bucket="bench-bucket", Key="dir/obj.h5md", Range="bytes=300000-300009")
            assert exc.value.response["Error"]["Code"] == "InvalidRange"
            whole = s3.get_object(Bucket="bench-bucket", Key="dir/obj.h5md")
            assert whole["Body"].read() == body
            assert bench.FRONT_HEADER not in whole["ResponseMetadata"]["HTTPHeaders"]
        finally:
            server.stop()
    want = [(body[1000:41000], "bytes 1000-40999/300000"), (body[299990:], "bytes 299990-299999/300000"),
            (body[299990:], "bytes 299990-299999/300000")]
    for dispatch, answers in got.items():
        assert [(a[0], a[2]) for a in answers] == want
        assert [a[4] for a in answers] == ([None] * 3 if dispatch else ["ranged"] * 3)
    assert [a[1] for a in got[False]] == [a[1] for a in got[True]] == [etag] * 3


def test_the_proxy_and_the_front_keep_connections_alive_without_waiting_for_acks():
    """50 range GETs one after another on one connection, through the benchmark's proxy to its server's
    front: every answer keeps the connection open and has the object's bytes, the proxy logs each, and
    none waits for a delayed ACK (40 ms each, 2 s in all, when a response's head and body were two writes
    on a socket without TCP_NODELAY)."""
    import os
    import time
    from http.client import HTTPConnection

    bench = _benchmark_module()
    body = os.urandom(2_000_000)
    server = bench.Server()
    proxy = bench.Proxy(server.url)
    proxy.start()
    try:
        s3 = __import__("boto3").client("s3", endpoint_url=server.url, aws_access_key_id=bench.KEY_ID,
                                        aws_secret_access_key=bench.SECRET, region_name="us-east-1")
        s3.create_bucket(Bucket="bench-bucket")
        s3.put_object(Bucket="bench-bucket", Key="obj", Body=body)
        for url in (server.url, proxy.url):
            port = int(url.rsplit(":", 1)[1])
            conn = HTTPConnection("127.0.0.1", port, timeout=60)
            proxy.reset()
            t0 = time.perf_counter()
            for i in range(50):
                a = i * 37_000
                conn.request("GET", "/bench-bucket/obj", headers={"Range": f"bytes={a}-{a + 29_999}"})
                resp = conn.getresponse()
                assert resp.status == 206 and resp.read() == body[a:a + 30_000]
                assert not resp.will_close
            took = time.perf_counter() - t0
            conn.close()
            assert took < 1.5, f"{url}: 50 requests took {took:.2f} s"
        served = proxy.snapshot()
        assert served["requests"] == 50 and served["bytes"] == 50 * 30_000
        assert sorted(served["ranges"]["obj"]) == [(i * 37_000, i * 37_000 + 30_000) for i in range(50)]
    finally:
        proxy.stop()
        server.stop()


def test_the_files_server_answers_ranges_as_moto_does(tmp_path):
    """``--files`` (a machine without moto): the server answers range GETs, HEAD, If-Match and a range past
    the end from the files themselves, as moto answers them for the same object."""
    import os

    from botocore.exceptions import ClientError

    bench = _benchmark_module()
    body = os.urandom(300_000)
    (tmp_path / "obj.h5md").write_bytes(body)
    server = bench.Server(files=str(tmp_path))
    try:
        s3 = __import__("boto3").client("s3", endpoint_url=server.url, aws_access_key_id=bench.KEY_ID,
                                        aws_secret_access_key=bench.SECRET, region_name="us-east-1")
        head = s3.head_object(Bucket=bench.BUCKET, Key="obj.h5md")
        assert head["ContentLength"] == 300_000
        for rng, want, content_range in (("bytes=1000-40999", body[1000:41000], "bytes 1000-40999/300000"),
                                          ("bytes=299990-", body[299990:], "bytes 299990-299999/300000"),
                                          ("bytes=299990-400000", body[299990:], "bytes 299990-299999/300000")):
            r = s3.get_object(Bucket=bench.BUCKET, Key="obj.h5md", Range=rng, IfMatch=head["ETag"])
            assert (r["Body"].read(), r["ContentRange"], r["ETag"]) == (want, content_range, head["ETag"])
        for kwargs, code in (({"Range": "bytes=0-9", "IfMatch": '"0123"'}, "PreconditionFailed"),
                             ({"Range": "bytes=300000-300009"}, "InvalidRange"),
                             ({"Key": "missing.h5md"}, "NoSuchKey")):
            with pytest.raises(ClientError) as exc:
                s3.get_object(**{"Bucket": bench.BUCKET, "Key": "obj.h5md", **kwargs})
            assert exc.value.response["Error"]["Code"] == code
            assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == \
                {"PreconditionFailed": 412, "InvalidRange": 416, "NoSuchKey": 404}[code]
        assert s3.get_object(Bucket=bench.BUCKET, Key="obj.h5md")["Body"].read() == body
    finally:
        server.stop()


def test_several_server_processes_answer_the_files_and_share_one_cap(tmp_path):
    """``--server-processes 3``: 12 concurrent range GETs of 1 MB each get their bytes, answered by more
    than one process (their connections spread by the kernel), and together take at least the 12 MB's time
    at the 20 MB/s cap (0.6 s; each process capping alone would allow a third of that)."""
    import concurrent.futures as cf
    import os
    import time
    import urllib.request

    bench = _benchmark_module()
    body = os.urandom(12 * 2**20)
    (tmp_path / "obj.h5md").write_bytes(body)
    fronts = bench.Fronts(tmp_path, 3, 0.0, 20e6)
    try:
        def get(i: int) -> tuple[bytes, str, str]:
            req = urllib.request.Request(f"{fronts.url}/{bench.BUCKET}/obj.h5md",
                                         headers={"Range": f"bytes={i * 2**20}-{(i + 1) * 2**20 - 1}"})
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.read(), r.headers["Content-Range"], r.headers[bench.SERVED_BY]

        t0 = time.monotonic()
        with cf.ThreadPoolExecutor(12) as pool:
            got = list(pool.map(get, range(12)))
        took = time.monotonic() - t0
        for i, (data, content_range, _) in enumerate(got):
            assert data == body[i * 2**20:(i + 1) * 2**20]
            assert content_range == f"bytes {i * 2**20}-{(i + 1) * 2**20 - 1}/{len(body)}"
        assert took >= 12 * 2**20 / 20e6 * 0.95, took
        assert len({by for _, _, by in got}) >= 2   # (all 12 on one of 3: a chance of 3 in 531,441)
        assert {int(by) for _, _, by in got} <= {p.pid for p in fronts.procs}
    finally:
        fronts.stop()
    assert not any(p.is_alive() for p in fronts.procs)
