"""Trajectories behind a URL: trajscale reading an S3 object against the same file on local disk,
download-then-run and zarrtraj, on a local S3 server behind a proxy that emulates a network.

    python benchmarks/remote.py [--parts 100] [--workdir remote-output] [--delay-ms 20] [--mbps 100]
                                [--workloads rmsd,rmsf,mean] [--executors serial,processes2]
                                [--layouts default,remote] [--sides local,url,download,zarrtraj] [--smoke]
                                [--pairs A:B,... [--repeat 5]] [--commands] [--moto-dispatch]
                                [--files [--server-processes K]] [--server-cpus LIST] [--client-cpus LIST]
                                [--source TPR XTC]

Data: AdK in water (MDAnalysisTests' ``adk_oplsaa.tpr`` + ``adk_oplsaa.xtc``: 47,681 atoms, 10 frames, the
XTC repeated ``--parts`` times: 100 parts are 1,000 frames, 572 MB of float32 positions), converted by
``trajscale convert`` twice: with the default layout (``--chunks auto``, ~2 MiB chunks, metadata where HDF5
puts it) and with ``--layout remote`` (~8 MiB chunks, metadata in the file's first 256 KiB). (The issue's
YiiP store, 43,480 atoms x 1,000 frames, is not available here; this system is the same size.)

The server is moto's ``ThreadedMotoServer`` application on 127.0.0.1, in a process of its own, answering a
range GET with the range's bytes (:func:`ranges_without_copies`; ``--moto-copies``: moto's own way, which
reads the whole object for each), a simple range GET of a stored object from a front that skips moto's
dispatch (:func:`ranged_answer`: the same bytes, ETag and checks at a fraction of moto's 2 ms of CPU a
request; ``--moto-dispatch``: through moto's dispatch too); every request to it goes through
:class:`Proxy`, a threaded HTTP proxy that waits ``--delay-ms`` before forwarding each request and caps
the bytes it sends back, all connections together, at ``--mbps`` MB/s (this machine's kernel has no netem:
the proxy is the emulated network). It counts every request and byte, and when each was in flight.
With ``--files --pairs``, ``--server-processes K`` puts K processes in the place of both (:class:`Fronts`):
each answers from the files after the delay, within the cap they share; one event loop answers a few
thousand requests a second, fewer than several client processes ask, and a store's service should not be
what a comparison of clients measures.

Workloads (each a whole process, the way a user runs it):

* ``rmsd``: ``trajscale run rmsd TPR TRAJ`` (CA atoms, the default selection);
* ``rmsf``: ``trajscale run rmsf TPR TRAJ --select all`` (every atom);
* ``mean``: ``trajscale.open_dataset(None, TRAJ, chunks={}).positions.astype("float64").mean("frame")``, the
  lazy array mean, computed by Dask's synchronous scheduler (serial), its processes scheduler
  (``processes2``: 2 worker processes) or its threaded scheduler, Dask's default (``threads2``: 2
  threads; for ``rmsd`` and ``rmsf``, ``--executor threads -n 2``).

Sides: ``local`` (trajscale on the local file, no network), ``url`` (trajscale on ``s3://bucket/key``
through the proxy, as a first run on the object: the cached HDF5 metadata of earlier runs removed first),
``url-warm`` (the same as a later run on the object, which opens it from the metadata the first run
cached), ``download`` (the whole object fetched through the proxy by a plain client, boto3's
``download_file`` with its concurrent ranged parts, then ``trajscale run`` on the copy; the time is both),
``zarrtraj`` (zarrtraj 0.3.3's reader of the same object, MDAnalysis's ``rms.RMSD``; CA RMSD, serial, on the
default layout only; zarrtraj pins zarr<3, so it runs from its own venv, ``--zarrtraj-python``, default
/tmp/zarrtraj-venv/bin/python; a missing one is said and skipped).

Columns: wall seconds of the whole process; MB and requests the proxy served to it; and the fetch
efficiency of a ``url`` row: the rate trajscale's reads reached (bytes over the seconds during which at least
one of its requests was in flight at the proxy) over the rate a plain concurrent client (obstore, 64
requests at once) reaches fetching the same byte ranges from the same proxy right after, measured the same
way. ``MB read`` is
what the local run's tasks read (its report), ``x read`` the bytes a ``url`` row fetched over that. Exit 1
when a ``url`` or ``download`` row's output differs from the local file's (CSV byte for byte; the mean
within 1e-6), or zarrtraj's RMSD from trajscale's by more than 1e-4 A.

``--pairs A:B,...``: instead of the table, each pair of rows (``WORKLOAD-EXECUTOR-LAYOUT-SIDE``) timed as
whole processes in turn, A B A B ... (``--repeat``, default 5), with the server and the proxy up throughout;
the medians of each side and of the pairs' ratios A/B, and the load average (``WORKDIR/pairs.json``).

``--smoke``: 3 parts (30 frames), CA RMSD and RMSF on serial and the default layout, no zarrtraj: the test
suite's size (the figures then mean nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http import HTTPStatus
from pathlib import Path
from urllib.parse import unquote, urlsplit

BUCKET = "traj-data"
KEY_ID, SECRET = "benchmark", "benchmark-secret"

MEAN = r"""
import sys
import numpy as np
import trajscale
path, out, executor = sys.argv[1], sys.argv[2], sys.argv[3]
ds = trajscale.open_dataset(None, path, chunks={})
mean = ds.positions.astype("float64").mean("frame")
if executor == "serial":
    m = mean.compute(scheduler="synchronous")
else:
    kind = executor.rstrip("0123456789")
    m = mean.compute(scheduler=kind, num_workers=int(executor[len(kind):]))
np.save(out, m.values)
"""

ZARRTRAJ = r"""
import sys, warnings
warnings.filterwarnings("ignore")
import MDAnalysis as mda
import zarrtraj  # noqa: F401 - registers the reader
from MDAnalysis.analysis import rms
import numpy as np
top, url, endpoint, out = sys.argv[1:5]
u = mda.Universe(top, url, storage_options={"key": "%s", "secret": "%s",
                                            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}})
r = rms.RMSD(u, select="protein and name CA").run()
np.save(out, r.results.rmsd[:, 2])
""" % (KEY_ID, SECRET)


class Rate:
    """Bytes per second for all connections together: each piece waits for its slot."""

    def __init__(self, bytes_per_s: float) -> None:
        self.bps = bytes_per_s
        self._next = time.monotonic()

    def wait(self, n: int) -> float:
        """Seconds the next ``n`` bytes wait for their slot (the slot taken; one event loop calls it)."""
        if not self.bps:
            return 0.0
        now = time.monotonic()
        self._next = max(now, self._next) + n / self.bps
        return self._next - now


class SharedRate(Rate):
    """:class:`Rate` for the connections of several processes together (``--server-processes``): the next
    slot in shared memory, taken under its lock (``time.monotonic`` is the same clock in every process)."""

    def __init__(self, bytes_per_s: float, ctx) -> None:
        self.bps = bytes_per_s
        self._shared = ctx.Value("d", time.monotonic())

    def wait(self, n: int) -> float:
        if not self.bps:
            return 0.0
        with self._shared.get_lock():
            now = time.monotonic()
            self._shared.value = max(now, self._shared.value) + n / self.bps
            return self._shared.value - now


HOP = ("connection", "keep-alive", "proxy-connection", "expect", "transfer-encoding", "content-length", "te",
       "upgrade")


class _Headers(dict):
    """Headers by lower-case name, asked for in any case (what :func:`ranged_answer` reads)."""

    def get(self, name: str, default=None):
        return super().get(name.lower(), default)


class _Closed(Exception):
    """The other side closed a connection."""


async def _read_head(reader) -> tuple[str, list[tuple[str, str]]]:
    """A request's or response's first line and headers (``_Closed`` at a clean end of the stream)."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise _Closed from exc
    lines = raw.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers.append((k.strip(), v.strip()))
    return lines[0], headers


async def _read_body(reader, headers: dict, bodiless: bool) -> bytes:
    """A message's body: Content-Length, chunked, or (a response that says neither) up to the close."""
    if bodiless:
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if not size:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":   # trailers
                    pass
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()


class Proxy:
    """An HTTP proxy in front of ``upstream``: ``delay_s`` before each request is forwarded, responses sent
    back at most ``bytes_per_s`` (all together; 0: no cap); every request logged (when it was in flight,
    its object, its byte range, the bytes sent back). One asyncio event loop in a thread of its own, with
    connections kept alive on both sides (a threaded proxy spent 0.5-1 ms of CPU a request on the run's own
    2 cores, more the more connections a run opened). ``answer``: a function of (method, path, headers)
    that answers a request itself, (status, headers, body), or gives None to forward it
    (:func:`ranged_answer`); ``port``: where it listens (0: a free port)."""

    PIECE = 256 * 1024

    def __init__(self, upstream: str, delay_s: float = 0.0, bytes_per_s: float = 0.0, port: int = 0,
                 answer=None, keep_log: bool = True, rate: Rate | None = None, reuse_port: bool = False) -> None:
        up = urlsplit(upstream)
        self.rate = rate if rate is not None else Rate(bytes_per_s)
        self.log: list[tuple] = []
        self._since = 0.0
        self._lock = threading.Lock()
        self._unlogged = 0   # requests read and not yet logged (their answers may be on their way)
        self._up = (up.hostname, up.port)
        self._delay, self._answer, self._keep_log = delay_s, answer, keep_log
        self._idle: list = []   # kept-alive upstream connections (reader, writer)
        self._loop = asyncio.new_event_loop()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:   # (several processes listening on one port: the kernel spreads the connections)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self._sock.bind(("127.0.0.1", port))
        self._sock.listen(1024)   # (a burst of new connections: the default queue drops SYNs)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server = None
        self._tasks: set = set()   # the connections being served

    async def _exchange(self, method: str, target: str, headers: list, body: bytes):
        """The upstream's answer to one request: (status line, headers, body); a kept-alive connection
        the upstream had closed is replaced and the request sent again once."""
        lines = [f"{method} {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers if k.lower() not in HOP]
        if body or method in ("PUT", "POST"):
            lines.append(f"Content-Length: {len(body)}")
        raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        for attempt in (0, 1):
            reused = bool(self._idle)
            reader, writer = self._idle.pop() if reused else await asyncio.open_connection(*self._up, limit=2**23)
            try:
                writer.write(raw)
                status, got = await _read_head(reader)
                low = {k.lower(): v for k, v in got}
                code = int(status.split()[1])
                data = await _read_body(reader, low, method == "HEAD" or code in (204, 304) or code < 200)
            except (_Closed, ConnectionError, asyncio.IncompleteReadError):
                writer.close()
                if attempt or not reused:
                    raise
                continue
            if "close" in low.get("connection", "").lower() or status.startswith("HTTP/1.0"):
                writer.close()
            else:
                self._idle.append((reader, writer))
            return status, got, data
        raise AssertionError("unreachable")

    async def _serve(self, reader, writer) -> None:
        self._tasks.add(asyncio.current_task())
        # (asyncio sets TCP_NODELAY only on sockets made with IPPROTO_TCP, not on those accepted from a socket
        # made without it: a response's head and body in two writes then waited 40 ms for a delayed ACK)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        unlogged = False
        try:
            while True:
                try:
                    line, headers = await _read_head(reader)
                except (_Closed, ConnectionError):
                    return
                t0 = time.monotonic()
                with self._lock:
                    self._unlogged += 1
                unlogged = True
                method, target, _ = line.split(" ", 2)
                low = {k.lower(): v for k, v in headers}
                if "100-continue" in low.get("expect", "").lower():
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = await _read_body(reader, low, "content-length" not in low and "transfer-encoding" not in low)
                if self._delay:
                    await asyncio.sleep(self._delay)
                own = self._answer(method, target, _Headers(low)) if self._answer is not None else None
                if own is not None:
                    code, got, data = own[0], own[1], own[2]
                    status = f"HTTP/1.1 {code} {HTTPStatus(code).phrase}"
                else:
                    status, got, data = await self._exchange(method, target, headers, body)
                length = next((v for k, v in got if k.lower() == "content-length"), "0") if method == "HEAD" \
                    else str(len(data))
                out = [status] + [f"{k}: {v}" for k, v in got if k.lower() not in HOP] + [f"Content-Length: {length}"]
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
                if method != "HEAD" and not self.rate.bps:
                    writer.write(data)
                elif method != "HEAD":
                    view = memoryview(data)
                    for i in range(0, len(data), self.PIECE):
                        piece = view[i:i + self.PIECE]
                        wait = self.rate.wait(len(piece))
                        if wait > 0:
                            await asyncio.sleep(wait)
                        writer.write(piece)
                        await writer.drain()
                await writer.drain()
                sent = 0 if method == "HEAD" else len(data)
                with self._lock:
                    if self._keep_log:
                        self.log.append((t0, time.monotonic(), method, unquote(target.split("?")[0]),
                                         low.get("range"), int(status.split()[1]), sent))
                    self._unlogged -= 1
                unlogged = False
                if "close" in low.get("connection", "").lower():
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return   # (a cancelled connection ends quietly: stop() cancels those still open)
        finally:
            if unlogged:   # (a request whose answer never went out: not logged)
                with self._lock:
                    self._unlogged -= 1
            self._tasks.discard(asyncio.current_task())
            writer.close()

    def serve_forever(self) -> None:
        """Serve in this thread until the process ends (the server process's front)."""
        self._loop.run_until_complete(self._start())
        self._loop.run_forever()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, sock=self._sock, limit=2**23)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(60)

    def stop(self) -> None:
        async def close():
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            for _, w in self._idle:
                w.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(60)

    def reset(self) -> None:
        """Count from now on (a request of an earlier process still in flight is not counted)."""
        with self._lock:
            self.log.clear()
            self._since = time.monotonic()

    def snapshot(self) -> dict:
        """Requests and bytes served since :meth:`reset`, the seconds during which at least one request was
        in flight, and the byte ranges of the objects' GETs (key -> [(start, stop)]). A request whose answer
        the client may already hold is logged a moment later, by the proxy's own thread: waited for (2 s at
        most: a request held by ``delay_s`` for a client that has gone is not)."""
        deadline = time.monotonic() + 2.0
        while self._unlogged and time.monotonic() < deadline:
            time.sleep(0.001)
        with self._lock:
            log = [e for e in self.log if e[0] >= self._since]
        busy, end = 0.0, None
        for t0, t1, *_ in sorted(log):
            if end is None or t0 > end:
                busy += t1 - t0
                end = t1
            elif t1 > end:
                busy += t1 - end
                end = t1
        ranges: dict[str, list] = {}
        for _, _, method, path, rng, status, n in log:
            if method != "GET" or status not in (200, 206):
                continue
            key = path.lstrip("/").split("/", 1)[-1]
            if rng and rng.startswith("bytes="):
                a, _, b = rng[6:].partition("-")
                ranges.setdefault(key, []).append((int(a), int(b) + 1 if b else int(a) + n))
            else:
                ranges.setdefault(key, []).append((0, n))
        return {"requests": len(log), "bytes": sum(e[-1] for e in log), "busy_s": busy, "ranges": ranges}


def ranges_without_copies() -> None:
    """Make this process's moto server answer a range GET with the range's bytes only.

    moto 5 answers every GET of an object by reading the whole object out of its buffer (a temporary
    file past 16 MB) under the object's lock, then slicing the range from it: a 40 kB range of a 172 MB
    object cost ~0.05-0.1 s of the server's CPU, one request at a time per object, so any reader making
    many requests measured moto, not itself (a 300-frame CA RMSD's 300 requests took 25 s, and two
    worker processes were no faster than one: they waited on the same lock). Real S3 serves a range
    without reading the rest of the object, nor lists a directory to route a request (moto does: ~180
    ``stat`` calls a request, 40 % of a range GET's time once the copy is gone). Here a simple range
    (``bytes=A-B``, ``bytes=A-``) reads only its bytes, and the directory is listed once; every other
    request (whole objects, suffix ranges, the request's checks: ETag, ``If-Match``, credentials) is
    moto's own.
    """
    from moto.s3 import models, responses

    if getattr(models.FakeKey, "_ranges_without_copies", False):
        return
    local = threading.local()
    whole = models.FakeKey.value
    key_response = responses.S3Response.key_response

    class Ranged:
        """The object's bytes as moto's range code uses them: a length, and slices read on demand."""

        def __init__(self, key) -> None:
            self.key, self.n = key, key.size

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, part: slice) -> bytes:
            a, b, _ = part.indices(self.n)
            with self.key.lock:
                self.key._value_buffer.seek(a)
                return self.key._value_buffer.read(max(0, b - a))

    def value(self):
        return Ranged(self) if getattr(local, "ranged", False) else whole.fget(self)

    def ranged_key_response(self, request, full_url, headers):
        rng = request.headers.get("range") or ""
        simple = request.method == "GET" and rng.startswith("bytes=") and "," not in rng \
            and rng[6:].split("-")[0].isdigit()
        local.ranged = simple and "partNumber" not in full_url
        try:
            return key_response(self, request, full_url, headers)
        finally:
            local.ranged = False

    models.FakeKey.value = property(value, whole.fset)
    responses.S3Response.key_response = ranged_key_response
    models.FakeKey._ranges_without_copies = True
    # moto also lists its own package directory (~180 stat calls) to route every request: listed once here
    from moto import backends

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: iter(modules)


#: The header :func:`ranged_answer`'s answers carry (how a test tells the front answered, not moto).
FRONT_HEADER = "x-benchmark-front"


def ranged_answer():
    """The front's answer to a simple range GET of an object moto holds, without moto's dispatch: a function
    of (method, path, headers) giving (status, headers, body), or None for moto to answer.

    moto spends about 2 ms of CPU on every request (werkzeug's parsing and a thread per connection,
    Flask's routing, moto's dispatch, its request id from 52 random choices, its response headers), on the
    same 2 cores as the proxy and the run it serves: a reader that makes one request a frame measured
    moto's request rate (about 450 a second, one core's worth under its interpreter lock), where S3's front
    ends answer thousands a second per prefix on machines of their own. A path-style ``GET /BUCKET/KEY``
    with ``Range: bytes=A-B`` or ``bytes=A-`` and nothing else moto would act on (no query string, no
    ``If-None-Match``/``If-Modified-Since``/``If-Unmodified-Since``, no SSE-C headers) is answered from the
    object moto holds: its bytes ``A`` to ``B`` (read under the object's lock from moto's buffer), its
    ETag, Last-Modified and Content-Type, ``Content-Range``; ``If-Match`` with the object's ETag (or ``*``)
    is honoured here, any other ``If-Match`` goes to moto (its 412). moto answers everything else as it
    is: other requests, a missing bucket or key, a delete marker, an encrypted or archived object, a
    range past the end (its 416).
    """
    from moto.s3.models import FakeKey, s3_backends

    passed = ("if-none-match", "if-modified-since", "if-unmodified-since",
              "x-amz-server-side-encryption-customer-algorithm")

    def stored(bucket: str, name: str):
        try:
            partition, account = s3_backends.bucket_accounts[bucket]
            key = s3_backends[account][partition].buckets[bucket].keys.get(name)
        except (KeyError, AttributeError, TypeError):
            return None
        if not isinstance(key, FakeKey) or getattr(key, "encryption", None) or \
                (key.storage_class or "STANDARD") != "STANDARD":
            return None
        return key

    def answer(method: str, path: str, headers):
        rng = headers.get("Range") or ""
        if method != "GET" or "?" in path or not rng.startswith("bytes=") or "," in rng \
                or any(headers.get(h) for h in passed):
            return None
        a, _, b = rng[6:].strip().partition("-")
        host = (headers.get("Host") or "").split(":")[0]
        bucket, _, name = unquote(path).lstrip("/").partition("/")
        key = stored(bucket, name) if a.isdigit() and (b.isdigit() or not b) and name and \
            host in ("127.0.0.1", "localhost") else None
        if key is None:
            return None
        size, etag = key.size, key.etag
        first, last = int(a), min(int(b) if b else size - 1, size - 1)
        match = (headers.get("If-Match") or "").strip()
        if first >= size or last < first or (match and match not in ("*", etag, etag.strip('"'))):
            return None   # moto's 416 or 412
        with key.lock:
            key._value_buffer.seek(first)
            data = key._value_buffer.read(last + 1 - first)
        return 206, [("ETag", etag), ("Last-Modified", key.last_modified_RFC1123),
                     ("Content-Type", key.metadata.get("Content-Type", "binary/octet-stream")),
                     ("Accept-Ranges", "bytes"), ("Content-Range", f"bytes {first}-{last}/{size}"),
                     (FRONT_HEADER, "ranged")], data

    return answer


#: The header naming the process that answered (``--server-processes``: which of them)
SERVED_BY = "X-Served-By"


def files_answer(folder: Path):
    """The front's answers from the files in ``folder``, without moto (``--files``: a machine without moto
    and boto3): ``GET /BUCKET/NAME`` (whole, or ``Range: bytes=A-B`` / ``bytes=A-``) and ``HEAD`` from
    ``folder/NAME``, with an ETag made of its size and modification time, ``If-Match`` honoured (412), a range
    past the end refused (416), anything else 404 ``NoSuchKey``. The answers' bytes and headers are those
    :func:`ranged_answer` gives; requests are not signed-checked (a test of credentials needs moto)."""
    from email.utils import formatdate

    def answer(method: str, path: str, headers):
        bucket, _, name = unquote(path.split("?")[0]).lstrip("/").partition("/")
        file = folder / name
        if method not in ("GET", "HEAD") or bucket != BUCKET or not name or "/" in name or not file.is_file():
            return 404, [("Content-Type", "application/xml")], b"<Error><Code>NoSuchKey</Code></Error>"
        st = file.stat()
        size, etag = st.st_size, f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
        match = (headers.get("If-Match") or "").strip()
        if match and match not in ("*", etag, etag.strip('"')):
            return 412, [("Content-Type", "application/xml")], b"<Error><Code>PreconditionFailed</Code></Error>"
        found = [("ETag", etag), ("Last-Modified", formatdate(st.st_mtime, usegmt=True)),
                 ("Content-Type", "binary/octet-stream"), ("Accept-Ranges", "bytes"), (SERVED_BY, str(os.getpid()))]
        if method == "HEAD":
            return 200, found + [("Content-Length", str(size))], b""
        rng = headers.get("Range") or ""
        first, last = 0, size - 1
        if rng:
            a, _, b = rng[6:].strip().partition("-") if rng.startswith("bytes=") else ("", "", "")
            if not a.isdigit() or not (b.isdigit() or not b) or int(a) >= size or (b and int(b) < int(a)):
                return 416, [("Content-Range", f"bytes */{size}"), ("Content-Type", "application/xml")], \
                    b"<Error><Code>InvalidRange</Code></Error>"
            first, last = int(a), min(int(b) if b else size - 1, size - 1)
            found.append(("Content-Range", f"bytes {first}-{last}/{size}"))
        with open(file, "rb") as fh:
            fh.seek(first)
            data = fh.read(last + 1 - first)
        return (206 if rng else 200), found, data

    return answer


def serve(port: int, copies: bool, dispatch: bool = False, files: str | None = None) -> None:
    """moto's server on ``port`` of 127.0.0.1 until killed (the body of :class:`Server`'s process):
    ``ThreadedMotoServer``'s application and request handler, behind a front on ``port`` that keeps
    connections alive and gives :func:`ranged_answer`'s answers, and hands every other request to moto
    (on a port of its own); ``dispatch`` or ``copies``: moto alone on ``port``, every request through its
    dispatch; ``files``: no moto, the front answers from the files in that folder (:func:`files_answer`)."""
    if files:
        Proxy("http://127.0.0.1:9", port=port, answer=files_answer(Path(files)), keep_log=False).serve_forever()
        return
    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)   # no line per request
    if not copies:
        ranges_without_copies()
    app = DomainDispatcherApplication(create_backend_app)
    if copies or dispatch:
        make_server("127.0.0.1", port, app, True, request_handler=MotoRequestHandler).serve_forever()
        return
    moto = make_server("127.0.0.1", 0, app, True, request_handler=MotoRequestHandler)
    threading.Thread(target=moto.serve_forever, daemon=True).start()
    Proxy(f"http://127.0.0.1:{moto.server_address[1]}", port=port, answer=ranged_answer(),
          keep_log=False).serve_forever()


class Fronts:
    """``--server-processes K``: K processes, each answering range GETs from the stores' files
    (:func:`files_answer`) after the delay and within the cap, all on one port (the kernel spreads the
    connections between them) and the cap shared (:class:`SharedRate`). One Python event loop answers a
    few thousand requests a second: fewer than several client processes ask of it, where a store's
    service is not the limit. Nothing is logged (``--pairs`` only)."""

    def __init__(self, folder: Path, n: int, delay_s: float, bytes_per_s: float) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        port = free_port()
        rate = SharedRate(bytes_per_s, ctx)
        self.procs = [ctx.Process(target=_front, args=(str(folder), port, delay_s, rate), daemon=True)
                      for _ in range(n)]
        for proc in self.procs:
            proc.start()
        self.url = f"http://127.0.0.1:{port}"
        wait_for_port(port, 60, lambda: all(proc.is_alive() for proc in self.procs), "the server's processes")

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.join()


def _front(folder: str, port: int, delay_s: float, rate: Rate) -> None:
    Proxy("http://127.0.0.1:9", delay_s=delay_s, port=port, answer=files_answer(Path(folder)), keep_log=False,
          rate=rate, reuse_port=True).serve_forever()


class Server:
    """moto's S3 server in a process of its own (as a real server is: it shares no interpreter lock with the
    proxy or the benchmark), on a free port of 127.0.0.1."""

    def __init__(self, copies: bool = False, dispatch: bool = False, files: str | None = None) -> None:
        port = free_port()
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); " \
               f"import remote; remote.serve({port}, {copies!r}, {dispatch!r}, {files!r})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}"
        wait_for_port(port, 120, lambda: self.proc.poll() is None, "moto's server")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def wait_for_port(port: int, seconds: float, alive, what: str) -> None:
    """Until 127.0.0.1:``port`` takes a connection; exit naming ``what`` if ``alive()`` turns false or
    ``seconds`` pass first."""
    end = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if not alive() or time.monotonic() > end:
                raise SystemExit(f"remote.py: {what} did not start") from None
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: AdK in water's TPR and XTC where ``--source`` names them (else MDAnalysisTests' own)
SYSTEM: dict[str, str] = {}


def adk() -> tuple[str, str]:
    """AdK in water's TPR and XTC: those given, else MDAnalysisTests'."""
    if SYSTEM:
        return SYSTEM["tpr"], SYSTEM["xtc"]
    from MDAnalysisTests.datafiles import TPR, XTC

    return TPR, XTC


#: The processors the runs are kept to (``--client-cpus``; None: any)
CLIENT_CPUS: set[int] | None = None


def _on_client_cpus() -> None:
    """A run's process kept to the client's processors (what it starts inherits them)."""
    if CLIENT_CPUS:
        os.sched_setaffinity(0, CLIENT_CPUS)


def cpu_list(text: str) -> set[int]:
    """``0-1,4`` as {0, 1, 4}."""
    cpus: set[int] = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
    return cpus


def build(workdir: Path, parts: int, layout: str) -> Path:
    """The H5MD store of ``parts`` copies of AdK's XTC in ``layout`` (built once, reused)."""
    TPR, XTC = adk()
    out = workdir / f"adk_{parts * 10}_{layout}.h5md"
    if not out.exists():
        cmd = [sys.executable, "-m", "trajscale.cli.main", "convert", TPR, *[XTC] * parts, "-o", str(out), "-q",
               *(["--layout", "remote"] if layout == "remote" else [])]
        subprocess.run(cmd, check=True)
    return out


def cached_metadata(work: Path) -> Path:
    """Where the runs' cache folder keeps remote objects' HDF5 metadata (a ``url`` row empties it first)."""
    return work / "cache" / "hdf5-metadata"


def env_for(endpoint: str, work: Path) -> dict:
    """The environment of every process that reads the bucket: the standard AWS variables, and the
    benchmark's own cache folder (``WORKDIR/cache``: parsed topology, remote objects' metadata)."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1",
               AWS_ENDPOINT_URL=endpoint, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               TRAJSCALE_CACHE_DIR=str(work / "cache"))
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        env.pop(k, None)
    return env


def run_cmd(workload: str, executor: str, traj: str, out: Path) -> list[str]:
    """The command of a workload; a ``run`` writes its report beside ``out`` (``.json``)."""
    TPR = adk()[0]

    if workload == "mean":
        return [sys.executable, "-c", MEAN, traj, str(out), executor]
    kind = executor.rstrip("0123456789")   # serial, processesN, threadsN
    ex = ["--executor", "serial"] if kind == "serial" else ["--executor", kind, "-n", executor[len(kind):]]
    sel = ["--select", "all"] if workload == "rmsf" else []
    return [sys.executable, "-m", "trajscale.cli.main", "run", workload, TPR, traj, *sel, *ex, "--out", str(out),
            "--report", str(out.with_suffix(".json")), "--overwrite", "-q"]


def bytes_read(out: Path) -> int | None:
    """Bytes a run's tasks read (its report beside ``out``); None without a report."""
    rep = out.with_suffix(".json")
    if not rep.exists():
        return None
    return sum(int(t.get("bytes_read") or 0) for t in json.loads(rep.read_text()).get("tasks", []))


def timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=_on_client_cpus)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return wall


async def _replay(endpoint: str, key: str, ranges: list[tuple[int, int]], concurrency: int) -> None:
    import obstore
    from obstore.store import S3Store

    store = S3Store(BUCKET, endpoint=endpoint, access_key_id=KEY_ID, secret_access_key=SECRET, region="us-east-1",
                    client_options={"allow_http": True})
    sem = asyncio.Semaphore(concurrency)

    async def one(a: int, b: int) -> None:
        async with sem:
            data = await obstore.get_range_async(store, key, start=a, end=b)
            assert len(data) == b - a

    await asyncio.gather(*(one(a, b) for a, b in ranges))


def plain_rate(proxy: Proxy, key: str, ranges: list[tuple[int, int]], concurrency: int = 64) -> float:
    """Bytes per second a plain concurrent client reaches fetching ``ranges`` of ``key`` through ``proxy``:
    bytes over the seconds its requests were in flight there (as trajscale's rate is measured)."""
    if not ranges:
        return float("nan")
    proxy.reset()
    asyncio.run(_replay(proxy.url, key, ranges, concurrency))
    served = proxy.snapshot()
    return served["bytes"] / max(served["busy_s"], 1e-9)


DOWNLOAD = r"""
import sys
import boto3
bucket, key, out = sys.argv[1:4]
boto3.client("s3").download_file(bucket, key, out)
"""


def write_commands(work: Path, stores: dict, workloads, executors, layouts, sides, env: dict, endpoint: str,
                   zarr_py: str | None) -> None:
    """Each row's whole command as a shell script (the AWS environment exported first): local, url,
    download (the plain client's download, then the run on the copy, then the copy removed) and zarrtraj."""
    import shlex

    TPR = adk()[0]
    cmd_dir = work / "commands"
    cmd_dir.mkdir(exist_ok=True)
    exports = "".join(f"export {k}={shlex.quote(env[k])}\n" for k in
                      ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
                       "OMP_NUM_THREADS", "TRAJSCALE_CACHE_DIR"))
    for workload in workloads:
        for executor in executors:
            for lay in layouts:
                path, key = stores[lay], stores[lay].name
                url = f"s3://{BUCKET}/{key}"
                suffix = ".npy" if workload == "mean" else ".csv"
                for side in sides:
                    out = work / "commands" / f"{workload}-{executor}-{lay}-{side}{suffix}"
                    if side == "local":
                        lines = [shlex.join(run_cmd(workload, executor, str(path), out))]
                    elif side == "url":   # as a first run on the object: no cached metadata
                        lines = [shlex.join(["rm", "-rf", str(cached_metadata(work))]),
                                 shlex.join(run_cmd(workload, executor, url, out))]
                    elif side == "url-warm":   # as a later run (its first run fills the cache)
                        lines = [shlex.join(run_cmd(workload, executor, url, out))]
                    elif side == "download":
                        copy = work / "commands" / f"download-{key}"
                        lines = [shlex.join([sys.executable, "-c", DOWNLOAD, BUCKET, key, str(copy)]),
                                 shlex.join(run_cmd(workload, executor, str(copy), out)),
                                 shlex.join(["rm", "-f", str(copy)])]
                    elif side == "zarrtraj" and zarr_py and workload == "rmsd" and executor == "serial":
                        npy = str(out.with_suffix(".npy"))
                        lines = [shlex.join([zarr_py, "-c", ZARRTRAJ, TPR, url, endpoint, npy])]
                    else:
                        continue
                    script = cmd_dir / f"{workload}-{executor}-{lay}-{side}.sh"
                    script.write_text("#!/bin/sh\nset -e\n" + exports + "\n".join(lines) + "\n")
                    print(script)


def time_pairs(work: Path, pairs: list[str], repeat: int, env: dict) -> list[dict]:
    """Each pair ``A:B`` of row names (``WORKLOAD-EXECUTOR-LAYOUT-SIDE``, as :func:`write_commands` names
    their scripts) timed as whole processes in turn, A B A B ... ``repeat`` times; the median of each side
    and of the pairs' ratios of wall time A/B, with the load average before and after."""
    import statistics

    def once(name: str) -> float:
        script = work / "commands" / f"{name}.sh"
        if not script.exists():
            raise SystemExit(f"remote.py: no command {name} (its workload, executor, layout and side must be "
                             "among those asked for)")
        t0 = time.perf_counter()
        proc = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True,
                              preexec_fn=_on_client_cpus)
        if proc.returncode:
            raise RuntimeError(f"{name} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
        return time.perf_counter() - t0

    out = []
    for pair in pairs:
        a, _, b = pair.partition(":")
        load0 = os.getloadavg()[0]
        ta, tb = [], []
        for _ in range(repeat):
            ta.append(once(a))
            tb.append(once(b))
        ratios = [x / y for x, y in zip(ta, tb, strict=True)]
        res = {"a": a, "b": b, "a_s": statistics.median(ta), "b_s": statistics.median(tb),
               "ratio": statistics.median(ratios), "ratios": ratios, "load": [load0, os.getloadavg()[0]]}
        print(f"A {a}  B {b}: A {res['a_s']:.2f} s, B {res['b_s']:.2f} s, A/B {res['ratio']:.3f} (pairs: "
              + " ".join(f"{r:.2f}" for r in ratios) + f"; load {load0:.1f} -> {res['load'][1]:.1f})", flush=True)
        out.append(res)
    return out


def row_line(row: dict) -> str:
    def num(key: str, width: int, fmt: str) -> str:
        v = row.get(key)
        return f"{'-':>{width}s}" if v is None else f"{v:{width}{fmt}}"

    return (f"{row['workload']:8s} {row['executor']:12s} {row['layout']:8s} {row['side']:10s} "
            f"{num('wall', 8, '.2f')} {num('read_mb', 8, '.1f')} {num('mb', 11, '.1f')} {num('requests', 9, 'd')} "
            f"{num('vs_local', 7, '.2f')} {num('efficiency', 10, '.2f')}")


def same_output(ref: Path, got: Path) -> bool:
    if ref.suffix == ".npy":
        import numpy as np

        return bool(np.allclose(np.load(ref), np.load(got), rtol=0, atol=1e-6))
    return ref.read_bytes() == got.read_bytes()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", type=int, default=100, help="copies of AdK's 10-frame XTC (default 100: 1,000 frames)")
    p.add_argument("--workdir", default="remote-output", help="where the stores are built (and reused)")
    p.add_argument("--delay-ms", type=float, default=20.0, help="the proxy's delay per request (default 20 ms)")
    p.add_argument("--mbps", type=float, default=100.0, help="the proxy's bandwidth cap in MB/s (default 100)")
    p.add_argument("--workloads", default="rmsd,rmsf,mean")
    p.add_argument("--executors", default="serial,processes2")
    p.add_argument("--layouts", default="default,remote")
    p.add_argument("--sides", default="local,url,download,zarrtraj")
    p.add_argument("--moto-copies", action="store_true",
                   help="leave moto answering each range GET by reading the whole object (its own behaviour; "
                        "see ranges_without_copies)")
    p.add_argument("--moto-dispatch", action="store_true",
                   help="send every request through moto's own dispatch (about 2 ms of CPU each), simple range "
                        "GETs included (see ranged_answer)")
    p.add_argument("--files", action="store_true",
                   help="no moto: the server answers range GETs from the stores' files (files_answer), for a "
                        "machine without moto and boto3 (sides local, url and url-warm only)")
    p.add_argument("--server-processes", type=int, default=1, metavar="K",
                   help="with --files and --pairs: K processes answer (and delay and cap) the requests, on one "
                        "port, instead of one proxy in front of one server (Fronts)")
    p.add_argument("--server-cpus", default="", metavar="LIST",
                   help="keep the server and the proxy to these processors (e.g. 4-15; default: any)")
    p.add_argument("--client-cpus", default="", metavar="LIST",
                   help="keep every timed run to these processors (e.g. 0-1; default: any)")
    p.add_argument("--source", nargs=2, metavar=("TPR", "XTC"), default=None,
                   help="AdK in water's TPR and XTC (default: MDAnalysisTests' adk_oplsaa.tpr and .xtc)")
    p.add_argument("--zarrtraj-python", default="/tmp/zarrtraj-venv/bin/python")
    p.add_argument("--smoke", action="store_true", help="30 frames, rmsd and rmsf, serial, default layout, "
                                                        "no zarrtraj: the test suite's run")
    p.add_argument("--pairs", default="",
                   help="time pairs of rows as whole processes in turn instead of the table: A:B[,A:B...], each "
                        "row named WORKLOAD-EXECUTOR-LAYOUT-SIDE (e.g. rmsd-processes2-default-url:"
                        "rmsd-serial-default-url); medians of each side and of the ratios A/B")
    p.add_argument("--repeat", type=int, default=5, help="pairs timed for each of --pairs (default 5)")
    p.add_argument("--commands", action="store_true",
                   help="measure nothing: keep the server and the proxy up (until Ctrl-C) and write each row's "
                        "whole command to WORKDIR/commands/WORKLOAD-EXECUTOR-LAYOUT-SIDE.sh, for timing them "
                        "in turn with a tool of your own (e.g. /usr/bin/time -v sh FILE)")
    args = p.parse_args(argv)
    if args.smoke:
        args.parts, args.workloads, args.executors, args.layouts = 3, "rmsd,rmsf", "serial", "default"
        args.sides = "local,url" if args.files else "local,url,download"
    workloads, executors = args.workloads.split(","), args.executors.split(",")
    layouts, sides = args.layouts.split(","), args.sides.split(",")
    if args.files and set(sides) - {"local", "url", "url-warm"}:
        p.error("--files serves the sides local, url and url-warm only (download and zarrtraj need moto)")
    if args.source:
        SYSTEM.update(tpr=str(Path(args.source[0]).resolve()), xtc=str(Path(args.source[1]).resolve()))
    global CLIENT_CPUS
    CLIENT_CPUS = cpu_list(args.client_cpus) if args.client_cpus else None
    try:
        if CLIENT_CPUS:
            mine = os.sched_getaffinity(0)
            os.sched_setaffinity(0, CLIENT_CPUS)   # (tried here: a run would fail in its preexec_fn)
            os.sched_setaffinity(0, mine)
        if args.server_cpus:   # (the proxy is a thread of this process; the server's process inherits them)
            os.sched_setaffinity(0, cpu_list(args.server_cpus))
    except (OSError, ValueError) as exc:
        p.error(f"cannot keep processes to --client-cpus/--server-cpus here: {exc}")
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)

    stores = {lay: build(work, args.parts, lay) for lay in layouts}
    # every row finds the topology parsed in the benchmark's cache folder, as a user's later runs do
    subprocess.run(run_cmd("rmsd", "serial", str(next(iter(stores.values()))), work / "warm-up.csv"),
                   env=dict(os.environ, TRAJSCALE_CACHE_DIR=str(work / "cache")), check=True, capture_output=True)
    if args.server_processes > 1:
        if not (args.files and args.pairs):
            p.error("--server-processes needs --files and --pairs (its requests are not counted)")
        server = proxy = Fronts(work, args.server_processes, args.delay_ms / 1e3, args.mbps * 1e6)
        endpoint = server.url
    else:
        server = Server(copies=args.moto_copies, dispatch=args.moto_dispatch, files=str(work) if args.files else None)
        proxy = Proxy(server.url, delay_s=args.delay_ms / 1e3, bytes_per_s=args.mbps * 1e6)
        proxy.start()
        endpoint = proxy.url
    upstream = server.url
    env = env_for(endpoint, work)
    via = None
    if not args.files:
        import boto3

        s3 = boto3.client("s3", endpoint_url=upstream, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
                          region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        for path in stores.values():
            s3.upload_file(str(path), BUCKET, path.name)
        via = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
                           region_name="us-east-1")

    zarr_py = args.zarrtraj_python
    zarr_ok = "zarrtraj" in sides and os.path.exists(zarr_py) and subprocess.run(
        [zarr_py, "-c", "import zarrtraj"], capture_output=True).returncode == 0
    print(f"AdK in water, {args.parts * 10} frames x 47,681 atoms; proxy: {args.delay_ms:g} ms per request, "
          f"{args.mbps:g} MB/s; " + ", ".join(f"{lay} store {p.stat().st_size / 1e6:.0f} MB"
                                                for lay, p in stores.items())
          + (f"; server and proxy on processors {args.server_cpus}" if args.server_cpus else "")
          + (f"; runs on processors {args.client_cpus}" if args.client_cpus else "")
          + ("; server: the files (no moto)" if args.files else "")
          + (f", {args.server_processes} processes" if args.server_processes > 1 else ""))
    if "zarrtraj" in sides and not zarr_ok:
        print(f"zarrtraj: skipped ({zarr_py} cannot import zarrtraj: install zarrtraj==0.3.3 into its own venv, "
              "it pins zarr<3)")
    if args.pairs:
        try:
            write_commands(work, stores, workloads, executors, layouts, sides, env, endpoint, zarr_py if zarr_ok
                           else None)
            got = time_pairs(work, args.pairs.split(","), args.repeat, env)
            (work / "pairs.json").write_text(json.dumps(got, indent=1))
            return 0
        finally:
            proxy.stop()
            server.stop()
    if args.commands:
        try:
            write_commands(work, stores, workloads, executors, layouts, sides, env, endpoint, zarr_py if zarr_ok
                           else None)
            print("serving until Ctrl-C (or SIGTERM)", flush=True)
            signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0
        finally:
            proxy.stop()
            server.stop()
    rows, bad = [], []
    head = f"{'workload':8s} {'executor':12s} {'layout':8s} {'side':10s} {'wall s':>8s} {'MB read':>8s} " \
           f"{'MB fetched':>11s} {'requests':>9s} {'x read':>7s} {'efficiency':>10s}"
    print(head)
    try:
        for workload in workloads:
            for executor in executors:
                for lay in layouts:
                    path, key = stores[lay], stores[lay].name
                    url = f"s3://{BUCKET}/{key}"
                    suffix = ".npy" if workload == "mean" else ".csv"
                    ref = work / f"{workload}-{executor}-{lay}-local{suffix}"
                    local_read = None
                    for side in sides:
                        row = {"workload": workload, "executor": executor, "layout": lay, "side": side}
                        out = work / f"{workload}-{executor}-{lay}-{side}{suffix}"
                        proxy.reset()
                        if side == "local":
                            row["wall"] = timed(run_cmd(workload, executor, str(path), out), env)
                            local_read = bytes_read(out)
                            if local_read is not None:
                                row["read_mb"] = local_read / 1e6
                        elif side in ("url", "url-warm"):
                            if side == "url":   # as a first run on the object
                                shutil.rmtree(cached_metadata(work), ignore_errors=True)
                            else:   # as a later one: a first run, untimed, fills the cache for this object
                                timed(run_cmd(workload, executor, url, out), env)
                                proxy.reset()
                            row["wall"] = timed(run_cmd(workload, executor, url, out), env)
                            served = proxy.snapshot()
                            row["efficiency"] = (served["bytes"] / max(served["busy_s"], 1e-9)) / plain_rate(
                                proxy, key, served["ranges"][key])
                            row.update(mb=served["bytes"] / 1e6, requests=served["requests"])
                            if local_read:
                                row["vs_local"] = served["bytes"] / local_read
                        elif side == "download":
                            copy = work / f"download-{key}"
                            t0 = time.perf_counter()
                            via.download_file(BUCKET, key, str(copy))
                            served = proxy.snapshot()
                            row["wall"] = time.perf_counter() - t0 + timed(
                                run_cmd(workload, executor, str(copy), out), env)
                            row.update(mb=served["bytes"] / 1e6, requests=served["requests"])
                            copy.unlink()
                        elif side == "zarrtraj":
                            if not (zarr_ok and workload == "rmsd" and executor == "serial" and lay == "default"):
                                continue
                            TPR = adk()[0]
                            out = out.with_suffix(".npy")
                            row["wall"] = timed([zarr_py, "-c", ZARRTRAJ, TPR, url, endpoint, str(out)], env)
                            served = proxy.snapshot()
                            row.update(mb=served["bytes"] / 1e6, requests=served["requests"])
                        else:
                            raise SystemExit(f"remote.py: unknown side {side!r}")
                        if side == "zarrtraj" and ref.exists():
                            import numpy as np

                            theirs, ours = np.load(out), np.loadtxt(ref, delimiter=",", skiprows=1)[:, 2]
                            if len(theirs) != len(ours) or np.abs(theirs - ours).max() > 1e-4:
                                bad.append(f"{workload} {executor} {lay} zarrtraj: its RMSD differs from trajscale's")
                        if side in ("url", "url-warm", "download") and ref.exists() and not same_output(ref, out):
                            bad.append(f"{workload} {executor} {lay} {side}: output differs from the local file's")
                        rows.append(row)
                        print(row_line(row), flush=True)
    finally:
        proxy.stop()
        server.stop()
    (work / "remote.json").write_text(json.dumps(rows, indent=1))
    for line in bad:
        print(f"DIFFERS: {line}")
    shutil.rmtree(work / "cache", ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
