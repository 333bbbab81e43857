"""The store conformance suite: what every :class:`~trajscale.storage.bytestore.ByteStore` must do, against a
real server.

Subclass :class:`StoreConformance` in a test module and give it one fixture, ``backend``: a
:class:`Backend` that puts bytes where the store reads them (a folder, a bucket, a web server's root),
replaces and removes them, and opens a store on them, directly or through a :class:`TcpProxy` that cuts
a response mid-body or stops forwarding (a frozen server). A case that cannot happen to a store (a local
file has no connection to cut) is skipped with the reason, said by the backend. Listing is part of the
suite: a glob's matches (:meth:`trajscale.storage.location.Location.glob`), and a listing longer than the
server's page asked for in pages, counted at the proxy.

>>> class TestMyStore(StoreConformance):
...     @pytest.fixture
...     def backend(self, my_server):
...         return MyBackend(my_server)

Every test compares what the store read with the bytes the test wrote, never with another store.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from trajscale.errors import InputFileError, ServerUnreachable, TrajscaleError

#: Bytes of the object the tests read (several ranges of 64 kB, and more than a head request's 256 kB).
SIZE = 1_000_003
#: Seconds of ``retry_seconds`` the failure cases run with: a frozen server must be given up on within them.
RETRY_SECONDS = 2.0
#: What a bounded wait may take beyond ``retry_seconds`` on a loaded machine (a sleep, not CPU).
SLACK_S = 2.5


def payload(size: int = SIZE, seed: int = 0) -> bytes:
    """``size`` random bytes (the reference each read is compared with)."""
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


#: The first bytes of an HTTP request (what :attr:`TcpProxy.requests` counts).
_METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ", b"PATCH ", b"OPTIONS ")


class TcpProxy:
    """A TCP proxy on 127.0.0.1 in front of ``(host, port)``: it forwards bytes both ways (TLS passes through
    untouched), and on request cuts the server's answers, freezes, or refuses new connections (``refuse()``).

    ``cut(n, after)``: the next ``n`` connections that carry more than ``after`` bytes of answers are closed
    there, mid-response (a server's worker killed while it answered). ``freeze()``: from now on nothing is
    forwarded, on connections open or new (a server stopped with ``kill -STOP``): the client waits.
    ``freeze_after(n)``: freeze once ``n`` more bytes of answers have been forwarded (mid-run, perhaps
    mid-answer, where the test cannot see the requests: TLS). ``thaw()`` forwards again. ``cuts`` counts
    the answers cut, ``connections`` the connections accepted (frozen or not), ``answered`` the bytes of
    answers forwarded, ``frozen`` says whether it is frozen, and ``requests`` the HTTP requests forwarded
    (told by their first bytes, a method: plain http only; TLS passes through uncounted)."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(256)
        self.port = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._cut_left, self._cut_after = 0, 0
        self.cuts = 0
        self.requests = 0
        self.answered = 0
        self.connections = 0
        self._freeze_at: int | None = None
        self._frozen = threading.Event()
        self._closed = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="tcp-proxy").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self, n: int, after: int = 2000) -> None:
        with self._lock:
            self._cut_left, self._cut_after = n, after

    def freeze(self) -> None:
        self._frozen.set()

    def freeze_after(self, n: int) -> None:
        with self._lock:
            self._freeze_at = self.answered + n

    @property
    def frozen(self) -> bool:
        return self._frozen.is_set()

    def thaw(self) -> None:
        with self._lock:
            self._freeze_at = None
        self._frozen.clear()

    def refuse(self) -> None:
        """Refuse new connections from now on (a server that stopped listening); those open stay as they are."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)   # (wakes the accepting thread; a plain close would not)

    def close(self) -> None:
        self._closed.set()
        self._frozen.clear()
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            with contextlib.suppress(OSError):
                c.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._conns += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True, name="tcp-proxy-pump").start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        """Forward both ways until either side closes; cut or hold as told."""
        answered, cut_here = 0, False
        try:
            while not self._closed.is_set():
                if self._frozen.is_set():
                    time.sleep(0.05)
                    continue
                ready, _, _ = select.select([client, server], [], [], 0.1)
                for s in ready:
                    if self._frozen.is_set():
                        break
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is client:
                        if data.startswith(_METHODS):
                            with self._lock:
                                self.requests += 1
                        server.sendall(data)
                        continue
                    with self._lock:
                        if not cut_here and self._cut_left > 0 and answered + len(data) > self._cut_after:
                            self._cut_left -= 1
                            self.cuts += 1
                            cut_here = True
                    if cut_here:   # the answer's first bytes only, then the connection ends mid-body
                        client.sendall(data[:max(0, self._cut_after - answered)])
                        return
                    answered += len(data)
                    client.sendall(data)
                    with self._lock:
                        self.answered += len(data)
                        if self._freeze_at is not None and self.answered >= self._freeze_at:
                            self._frozen.set()
        except OSError:
            return
        finally:
            for s in (client, server):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()


class Backend:
    """Where a store's bytes live, for the suite: subclass it for each store.

    ``put(name, data)`` stores ``data`` under ``name`` and returns its location (a path or URL);
    ``location(name)`` is that location without storing anything (a missing object's); ``replace(name,
    data)`` puts other bytes under the same name; ``open(location, options)`` opens the store on it;
    ``proxied(name)`` (a context manager) gives a location of ``name`` reached through a :class:`TcpProxy`
    and the proxy; ``denied(name, data)`` a location whose reading is refused. ``no_*`` attributes give
    the reason a case does not apply (None: it does)."""

    #: why this store has no connection to cut or freeze (a local file)
    no_connection: str | None = None
    #: why this store cannot be denied to the tests (root reads every local file)
    no_denial: str | None = None
    #: why an object this store reads cannot be replaced under it (a Hub's file, read at its commit)
    no_replacement: str | None = None
    #: why this store has no listing (a web server's: a glob over it is refused)
    no_listing: str | None = None
    #: keys in one page of the server's listing (None: :attr:`no_paging` says why there are no pages to count)
    page: int | None = None
    no_paging: str = "this store's listing has no pages"

    def listing_options(self) -> dict:
        """The storage options a listing of this store takes (those :meth:`open` adds)."""
        return {}

    def put_many(self, names: list[str], data: bytes = b"") -> None:
        """``data`` under each of ``names`` (a backend with a quicker way than :meth:`put` each overrides it)."""
        for name in names:
            self.put(name, data)

    def put(self, name: str, data: bytes) -> str:
        raise NotImplementedError

    def location(self, name: str) -> str:
        raise NotImplementedError

    def replace(self, name: str, data: bytes) -> None:
        self.put(name, data)

    def open(self, location: str, options: dict | None = None):
        from trajscale.storage.location import Location

        return Location(location, options).store()

    @contextlib.contextmanager
    def proxied(self, name: str) -> Iterator[tuple[str, dict, TcpProxy]]:
        """(location, options, proxy) of ``name`` through a proxy."""
        raise NotImplementedError
        yield

    def denied(self, name: str, data: bytes) -> tuple[str, dict]:
        raise NotImplementedError

    def forget(self) -> None:
        """Forget what this process keeps of objects it opened (their first bytes, for a few seconds)."""
        from trajscale.storage.objects import forget_heads

        forget_heads()


def _fast(options: dict | None = None) -> dict:
    return {"retry_seconds": RETRY_SECONDS, **(options or {})}


class StoreConformance:
    """The tests every byte store passes (see the module's docstring); needs a ``backend`` fixture."""

    @pytest.fixture
    def data(self) -> bytes:
        return payload()

    def test_ranges(self, backend, data):
        store = backend.open(backend.put("ranges.bin", data))
        assert store.size == len(data)
        ranges = [(0, 10), (1000, 70_000), (500_000, 500_001), (len(data) - 7, len(data)), (5, 5)]
        got = store.read_ranges(ranges)
        assert [bytes(g) for g in got] == [data[a:b] for a, b in ranges]

    def test_concurrent_ranges(self, backend, data):
        from concurrent.futures import ThreadPoolExecutor

        from trajscale.storage.ranges import read_coalesced

        store = backend.open(backend.put("concurrent.bin", data))
        rng = np.random.default_rng(1)
        starts = np.sort(rng.integers(0, len(data) - 70_000, 200))
        ranges = [(int(a), int(a) + int(n)) for a, n in zip(starts, rng.integers(1, 70_000, 200), strict=True)]
        got = read_coalesced(store, ranges, gap=0)
        assert [bytes(g) for g in got] == [data[a:b] for a, b in ranges]
        with ThreadPoolExecutor(4) as pool:   # several readers of one store at once
            results = list(pool.map(lambda i: store.read_ranges(ranges[i::4]), range(4)))
        for i, part in enumerate(results):
            assert [bytes(g) for g in part] == [data[a:b] for a, b in ranges[i::4]]

    def test_a_range_past_the_end_is_refused(self, backend, data):
        store = backend.open(backend.put("end.bin", data))
        with pytest.raises(InputFileError, match="outside"):
            store.read_ranges([(len(data) - 10, len(data) + 10)])

    def test_a_missing_object_is_one_line(self, backend):
        where = backend.location("missing.bin")
        with pytest.raises(InputFileError) as err:
            backend.open(where, _fast())
        text = str(err.value)
        assert "\n" not in text and text.startswith(f"{where}: ") and "no such" in text, text

    def test_a_replaced_object_is_refused(self, backend, data):
        """Another size: every store sees it, on the next read."""
        if backend.no_replacement:
            pytest.skip(backend.no_replacement)
        where = backend.put("replaced.bin", data)
        store = backend.open(where)
        assert bytes(store.read_ranges([(0, 100)])[0]) == data[:100]
        backend.replace("replaced.bin", payload(len(data) + 1000, seed=2))
        with pytest.raises(InputFileError, match="replaced"):
            store.read_ranges([(300_000, 400_000)])

    def test_a_same_size_replacement_is_refused_or_said(self, backend, data):
        """The same size at once (within the second): refused, or the store's validator says it cannot see it."""
        if backend.no_replacement:
            pytest.skip(backend.no_replacement)
        where = backend.put("same.bin", data)
        store = backend.open(where)
        said = store.validator
        assert said.kind and said.says
        backend.replace("same.bin", payload(len(data), seed=3))
        try:
            got = bytes(store.read_ranges([(300_000, 400_000)])[0])
        except InputFileError as exc:
            assert "replaced" in str(exc), exc
            return
        assert not said.complete, f"{said.kind} claims every replacement is seen, but one was read: {said.says}"
        assert got == payload(len(data), seed=3)[300_000:400_000]   # the new bytes, never a mix

    def test_denied_access_is_one_line(self, backend, data):
        if backend.no_denial:
            pytest.skip(backend.no_denial)
        where, options = backend.denied("denied.bin", data)
        with pytest.raises(TrajscaleError) as err:
            backend.open(where, _fast(options))
        text = str(err.value)
        assert "\n" not in text and "denied" in text, text

    def test_a_cut_connection_is_retried(self, backend, data):
        """Answers cut mid-body (a server's worker killed as it answered) are asked again: the bytes are right."""
        if backend.no_connection:
            pytest.skip(backend.no_connection)
        backend.put("cut.bin", data)
        with backend.proxied("cut.bin") as (where, options, proxy):
            store = backend.open(where, _fast(options))
            proxy.cut(3, after=4000)
            ranges = [(a, a + 65_536) for a in range(0, 600_000, 100_000)]
            got = store.read_ranges(ranges)
            assert [bytes(g) for g in got] == [data[a:b] for a, b in ranges]
            assert proxy.cuts >= 1 and store.stats.retries >= 1, (proxy.cuts, store.stats)

    def test_a_frozen_server_is_given_up_on_within_retry_seconds(self, backend, data):
        """A server that stops answering (``kill -STOP``): the read ends in one line within ``retry_seconds``
        (plus slack for a loaded machine), not a request timeout later."""
        if backend.no_connection:
            pytest.skip(backend.no_connection)
        backend.put("frozen.bin", data)
        with backend.proxied("frozen.bin") as (where, options, proxy):
            store = backend.open(where, _fast({**options, "timeout": 20}))
            proxy.freeze()
            t0 = time.monotonic()
            with pytest.raises(ServerUnreachable) as err:   # (the server's failure, no file's)
                store.read_ranges([(300_000, 400_000), (600_000, 700_000)])
            took = time.monotonic() - t0
            proxy.thaw()
        text = str(err.value)
        assert "\n" not in text and f"did not answer in {RETRY_SECONDS:g} s" in text, text
        assert took < RETRY_SECONDS + SLACK_S, f"gave up after {took:.1f} s, not within {RETRY_SECONDS:g} s"

    def test_a_frozen_server_is_given_up_on_once_not_per_request(self, backend, data):
        """Requests waiting their turn (``max_concurrency=1``, a try's timeout shorter than ``retry_seconds``)
        give up with the first, when the server has not answered for ``retry_seconds``: not each in its turn,
        one timeout after another."""
        if backend.no_connection:
            pytest.skip(backend.no_connection)
        backend.put("frozen-line.bin", data)
        with backend.proxied("frozen-line.bin") as (where, options, proxy):
            store = backend.open(where, {**options, "retry_seconds": 1, "timeout": 0.5, "max_concurrency": 1})
            proxy.freeze()
            t0 = time.monotonic()
            with pytest.raises(ServerUnreachable) as err:   # (each in its turn: 15 timeouts of 0.5 s)
                store.read_ranges([(a, a + 1000) for a in range(300_000, 900_000, 40_000)])
            took = time.monotonic() - t0
            proxy.thaw()
        assert "did not answer in 1 s" in str(err.value), err.value
        assert took < 1 + SLACK_S, f"gave up after {took:.1f} s, not within 1 s"

    def test_a_stop_signal_ends_a_read_waiting_on_a_frozen_server(self, backend, data):
        """A stop signal the CLI records (SIGTERM) while a read waits on a frozen server ends the read at once
        (SystemExit), not after the request's timeout or ``retry_seconds``."""
        from trajscale import util

        if backend.no_connection:
            pytest.skip(backend.no_connection)
        backend.put("frozen-stop.bin", data)
        with backend.proxied("frozen-stop.bin") as (where, options, proxy):
            store = backend.open(where, {**options, "retry_seconds": 60, "timeout": 20})
            proxy.freeze()
            for ranges in ([(300_000, 400_000)], [(300_000, 400_000), (600_000, 700_000)]):
                timer = threading.Timer(0.3, util.request_stop, (15,))
                t0 = time.monotonic()
                timer.start()
                try:
                    with pytest.raises(SystemExit):
                        store.read_ranges(ranges)
                finally:
                    timer.cancel()
                    util._stop_signal.clear()
                took = time.monotonic() - t0
                assert took < 0.3 + SLACK_S, f"{len(ranges)} range(s): stopped {took - 0.3:.1f} s after the signal"
            proxy.thaw()

    def test_a_refusal_ends_the_objects_other_requests(self, backend, data):
        """An object replaced during a read: once one request is refused, the object's others (waiting their
        turn, ``max_concurrency=1``) fail with it, unsent, and later reads fail at once with the same line."""
        if backend.no_connection or backend.no_replacement:
            pytest.skip(backend.no_replacement or "a local file makes no requests")
        where = backend.put("refusal.bin", data)
        store = backend.open(where, {"max_concurrency": 1})
        backend.replace("refusal.bin", payload(len(data) + 1000, seed=4))
        with pytest.raises(InputFileError, match="replaced") as err:
            store.read_ranges([(a, a + 1000) for a in range(300_000, 900_000, 20_000)])   # 30 in line
        sent = store.stats.requests
        time.sleep(0.5)   # (requests still waiting their turn would be sent by now)
        assert store.stats.requests <= sent + 1, f"{store.stats.requests - sent} requests sent after the refusal"
        assert sent <= 3, f"{sent} requests sent for 30 ranges of a replaced object"
        with pytest.raises(InputFileError) as again:
            store.read_ranges([(len(data) - 1000, len(data))])
        assert str(again.value) == str(err.value)


    def test_a_glob_lists_the_objects_it_matches(self, backend):
        """``*`` and ``?`` within a folder, ``**/`` across folders, ``[...]`` a set; a sibling whose name begins as
        the folder's is no match; the names the test wrote are the reference."""
        from trajscale.storage.location import Location

        if backend.no_listing:
            pytest.skip(backend.no_listing)
        names = ["glob/a.xtc", "glob/b.xtc", "glob/c.h5", "glob/sub/d.xtc", "glob/sub/deeper/e.xtc", "globx/f.xtc",
                 "glob.xtc"]
        for name in names:
            backend.put(name, name.encode())
        options = backend.listing_options()

        def found(pattern: str) -> list[str]:
            return [str(m) for m in Location.glob(backend.location(pattern), options)]

        def where(*chosen: str) -> list[str]:
            return sorted(backend.location(n) for n in chosen)

        assert found("glob/*.xtc") == where("glob/a.xtc", "glob/b.xtc")
        assert found("glob/**/*.xtc") == where("glob/a.xtc", "glob/b.xtc", "glob/sub/d.xtc", "glob/sub/deeper/e.xtc")
        assert found("glob/sub/*/?.xtc") == where("glob/sub/deeper/e.xtc")
        assert found("glob/[bc].*") == where("glob/b.xtc", "glob/c.h5")
        assert found("glob*/*.xtc") == where("glob/a.xtc", "glob/b.xtc", "globx/f.xtc")
        assert found("nothing/*.xtc") == []
        listed = Location(backend.location("glob"), options).list("*")
        assert [str(m) for m in listed] == where("glob/a.xtc", "glob/b.xtc", "glob/c.h5")
        # what is listed is read with the same options: each match's bytes are its own
        assert listed[2].read() == b"glob/c.h5" and listed[2].size == len(b"glob/c.h5")
        if backend.no_connection:
            return
        # a listing's answer cut mid-way is asked for again
        with backend.proxied("glob/a.xtc") as (first, through, proxy):
            proxy.cut(1, after=300)
            again = Location(first.rsplit("/", 1)[0], _fast({**options, **through})).list("*")
            assert [m.where.rsplit("/", 1)[1] for m in again] == ["a.xtc", "b.xtc", "c.h5"]
            assert proxy.cuts == 1

    def test_a_long_listing_is_asked_for_in_pages(self, backend):
        """More keys than the server's page: every one listed, in two requests (pages), not one per key."""
        from trajscale.storage.location import Location

        if backend.no_listing or backend.page is None:
            pytest.skip(backend.no_listing or backend.no_paging)
        names = [f"paged/k{i:05d}.bin" for i in range(backend.page + 1)]
        backend.put_many(names)
        with backend.proxied(names[0]) as (first, options, proxy):
            folder = first.rsplit("/", 1)[0]
            got = [str(m) for m in Location(folder, {**backend.listing_options(), **options}).list("*.bin")]
            asked = proxy.requests
        assert got == sorted(f"{folder}/{n.split('/')[1]}" for n in names)
        assert asked == 2, f"{len(names)} keys listed in {asked} requests (the server pages at {backend.page})"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no server on 127.0.0.1:{port} after {timeout} s")


__all__ = ["Backend", "StoreConformance", "TcpProxy", "free_port", "payload", "wait_for_port"]
