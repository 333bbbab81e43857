"""A real S3 server (moto's, on 127.0.0.1) for the session, and AdK stores on it.

The stores are AdK (MDAnalysisTests' ``adk_oplsaa.tpr`` + ``.xtc``, 10 frames x 47,681 atoms)
converted by ``trajscale convert``: plain, gzip-compressed, and lossy deltas (``--precision``),
each uploaded public-read, so the same objects serve the ``http://`` cases. Destructive tests
(a server stopped mid-run, wrong credentials) start their own server in a subprocess.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .stores import free_port, wait_for_port

# Installed, or the folder is skipped: looked up, not imported (moto's server and its Flask take ~0.7 s of CPU to
# import, which every xdist worker would pay at collection; the fixtures import them where they start a server)
if not all(importlib.util.find_spec(m) for m in ("obstore", "moto", "flask")):
    pytest.skip("obstore and moto[server] are not installed", allow_module_level=True)

from MDAnalysisTests import datafiles as _D  # noqa: E402,F401 - registers the data directory

DATA = Path(_D.__file__).parent / "data"
TPR, XTC = str(DATA / "adk_oplsaa.tpr"), str(DATA / "adk_oplsaa.xtc")
BUCKET = "traj"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret-do-not-print",
               "AWS_DEFAULT_REGION": "us-east-1"}
#: The stores the tests read, by name: the convert options that make each.
STORES = {"plain": [], "gzip": ["--compression", "gzip"], "lossy": ["--precision", "0.001", "--compression", "gzip"],
          "frame_gzip": ["--chunks", "1", "--compression", "gzip"]}


def upload_segments(server, local: str, folder: Path, prefix: str) -> str:
    """``local`` split into 2 H5MD parts in ``folder`` (``trajscale split``) and uploaded under ``prefix``:
    the URL of their segment index."""
    from tests.conftest import run_cli

    split = run_cli("split", local, "-o", str(folder), "--parts", "2", env=server.subprocess_env())
    assert split.returncode == 0, split.stderr
    client = server.client()
    for f in sorted(folder.iterdir()):
        client.upload_file(str(f), BUCKET, f"{prefix}/{f.name}")
    return f"s3://{BUCKET}/{prefix}/index.json"


class Server:
    """A moto S3 server: its endpoint, the environment that reaches it, and a boto3 client."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}

    def client(self, **creds):
        import boto3

        kw = {"aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
              "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"], **creds}
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", **kw)

    def subprocess_env(self) -> dict:
        return {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="session")
def s3_server():
    """moto's ThreadedMotoServer on a free port of 127.0.0.1, for the session."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    # its request lines are no part of what a command run in this process (run_cli_here) prints
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    wait_for_port(port, 60)
    try:
        yield Server(f"http://127.0.0.1:{port}")
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gcs_server():
    """fake-gcs-server (tests/remote/emulators.py) on a free port of 127.0.0.1, for the session; skipped where
    it is not installed."""
    from .emulators import FakeGcs, gcs_emulator_missing

    why = gcs_emulator_missing()
    if why:
        pytest.skip(why)
    server = FakeGcs()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """This process's environment pointed at the session's server (for the in-process tests)."""
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    from trajscale.storage import objects

    objects.forget_heads()   # a replaced object is fetched anew
    return s3_server


@pytest.fixture(scope="session")
def adk_stores(s3_server, tmp_path_factory):
    """``{name: (local path, s3:// URL, http:// URL)}`` of the AdK stores, converted once for the test run and
    uploaded to this session's server: under xdist, by the first worker that needs them (the others wait on a
    lock), in the folder the workers' temporary folders share; the tests only read them."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "remote-stores"
    root.mkdir(exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".made").exists():
            for left in root.glob("adk_*.h5md"):   # a worker that failed half-way
                left.unlink()
            procs = {name: subprocess.Popen([sys.executable, "-m", "trajscale.cli.main", "convert", TPR, XTC, "-q",
                                             "-o", str(root / f"adk_{name}.h5md"), *opts],
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                     for name, opts in STORES.items()}
            for name, proc in procs.items():
                out, _ = proc.communicate(timeout=300)
                assert proc.returncode == 0, f"convert {name}: {out}"
            (root / ".made").touch()   # last: a worker that failed half-way leaves none for the others
    client = s3_server.client()
    client.create_bucket(Bucket=BUCKET)
    stores = {}
    for name in STORES:
        local = root / f"adk_{name}.h5md"
        key = f"adk_{name}.h5md"
        client.upload_file(str(local), BUCKET, key, ExtraArgs={"ACL": "public-read"})
        stores[name] = (str(local), f"s3://{BUCKET}/{key}", f"{s3_server.endpoint}/{BUCKET}/{key}")
    return stores


class ServerProcess:
    """A moto server in its own process (it can be killed mid-run), with extra environment for it."""

    def __init__(self, env: dict | None = None) -> None:
        self.port = free_port()
        code = ("import time; from moto.server import ThreadedMotoServer as T; "
                f"T(ip_address='127.0.0.1', port={self.port}, verbose=False).start(); time.sleep(3600)")
        self.proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **(env or {})},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, 60)
        self.server = Server(f"http://127.0.0.1:{self.port}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=60)


@pytest.fixture
def own_server():
    """A moto server of the test's own, in a subprocess (stopped at the test's end if still up)."""
    made = []

    def make(env: dict | None = None) -> ServerProcess:
        made.append(ServerProcess(env))
        return made[-1]

    yield make
    for s in made:
        s.stop()


class FlakyProxy:
    """An HTTP proxy in front of a server that answers the first try of every range request (up to
    ``failures`` of them) with 503 SlowDown (S3's throttling answer), drops its connection, or (``how="delay"``)
    holds it ``delay`` seconds before forwarding it (past the client's timeout); it forwards the rest.
    ``every_try``: every try of a range fails, not only the first (a fault that persists). ``hold``: every
    range GET waits this long before it is forwarded (a network's round trip).

    Answers that look fine but are not: ``how="status"`` answers ``status`` (500 InternalError, 502 Bad
    Gateway as a load balancer says it, ...); ``"short"`` forwards the range and sends the first half of its
    bytes, headers as the server gave them but a Content-Length that matches what is sent; ``"long"`` sends
    the range with up to ``extra`` of the object's bytes before and after it, said to be the range asked for
    (Content-Range as asked, a Content-Length that matches what is sent);
    ``"whole"`` forwards the request without its Range: 200 and the whole object (a server that ignores
    Range). ``faults`` counts the answers spoiled."""

    def __init__(self, upstream: str, failures: int, how: str = "slowdown", delay: float = 0.0,
                 every_try: bool = False, hold: float = 0.0, status: int = 500, extra: int = 4096) -> None:
        import http.client
        import http.server
        import threading
        from urllib.parse import urlsplit

        target = urlsplit(upstream)
        state = {"left": failures, "lock": threading.Lock(), "seen": set()}
        self.gets = []   # (path, Range) of every GET received, in order: what a client asked of the server
        gets = self.gets
        self.arrivals = []   # (time.time(), path, Range) of every GET, as it arrived
        arrivals = self.arrivals
        self.flight = {"now": 0, "most": 0}   # GETs being answered at once, and the most there were
        flight = self.flight
        self.faults = {"n": 0}
        faults = self.faults
        spoils = ("short", "long", "whole")   # modes that forward the request and spoil its answer

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):   # quiet
                pass

            def _forward(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                if self.command == "GET":
                    with state["lock"]:
                        gets.append((self.path, self.headers.get("Range")))
                        arrivals.append((time.time(), self.path, self.headers.get("Range")))
                        flight["now"] += 1
                        flight["most"] = max(flight["most"], flight["now"])
                try:
                    self._answer(body)
                finally:
                    if self.command == "GET":
                        with state["lock"]:
                            flight["now"] -= 1

            def _answer(self, body):
                if self.command == "GET" and "Range" in self.headers:
                    time.sleep(hold)
                    with state["lock"]:
                        key = (self.path, self.headers["Range"])
                        fail = state["left"] > 0 and (every_try or key not in state["seen"])
                        state["seen"].add(key)
                        state["left"] -= fail
                    if fail and how == "delay":
                        time.sleep(delay)   # the client has given up by now; what it gets is never read
                        fail = False
                    if fail:
                        with state["lock"]:
                            faults["n"] += 1
                    if fail and how == "reset":
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    if fail and how == "status":
                        self._status()
                        return
                    if fail and how in spoils:
                        self._relay(body, how)
                        return
                    if fail:
                        msg = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                               b"<Message>Please reduce your request rate.</Message></Error>")
                        self.send_response(503)
                        self.send_header("Content-Type", "application/xml")
                        self.send_header("Content-Length", str(len(msg)))
                        self.end_headers()
                        self.wfile.write(msg)
                        return
                self._relay(body, None)

            def _status(self):
                if status == 502:   # a load balancer's page, not S3's XML
                    msg, kind = b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html"
                else:
                    msg = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
                           b"<Message>We encountered an internal error. Please try again.</Message></Error>")
                    kind = "application/xml"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)

            def _relay(self, body, spoil):
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = target.netloc
                if spoil == "whole":
                    headers = {k: v for k, v in headers.items() if k.lower() != "range"}
                if spoil == "long":   # the bytes asked with the object's ``extra`` ones before and after them
                    first, _, last = self.headers["Range"].partition("=")[2].partition("-")
                    headers = {k: v for k, v in headers.items() if k.lower() != "range"}
                    headers["Range"] = f"bytes={max(0, int(first) - extra)}-{int(last) + extra}"
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if spoil == "short":
                    data = data[:len(data) // 2]
                if spoil == "long":   # said to be the range asked for
                    asked = self.headers["Range"].partition("=")[2]
                    resp.headers.replace_header("Content-Range", f"bytes {asked}/"
                                                + resp.headers["Content-Range"].rsplit("/", 1)[1])
                with contextlib.suppress(OSError):   # a delayed answer's client is gone
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("transfer-encoding", "connection", "content-length", "server",
                                             "date"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        class Quiet(http.server.ThreadingHTTPServer):
            request_queue_size = 1024   # a client's burst of new connections is taken, not dropped

            def handle_error(self, request, client_address):   # a client gone mid-answer: not the test's news
                pass

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def certificates(tmp_path_factory):
    """A small CA, a server certificate it signs for 127.0.0.1, and a self-signed CA:TRUE one (openssl)."""
    from .servers import Certificates

    return Certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="session")
def nginx(tmp_path_factory, certificates):
    """Debian's nginx on free ports (http, https with the CA-signed certificate, https with the self-signed
    one), serving a folder the tests write into; stopped at the session's end."""
    from .servers import Nginx

    server = Nginx(tmp_path_factory.mktemp("nginx"), certificates)
    try:
        yield server
    finally:
        server.stop()
