"""An object behind a URL as a byte store (the twin of :class:`~.bytestore.LocalFile`), read by concurrent
range requests through obstore (:mod:`.clients`, :mod:`.inflight`).

A range answered with other bytes than asked for is never used, and every request pins the object's ETag
(``If-Match``), so an object replaced during a run is refused, not mixed. Failures are retried within
``retry_seconds`` (:mod:`.retry`) and counted (:class:`FetchStats`). obstore rather than s3fs: 1,000 ranges take
it well under a second and ``cat_ranges`` minutes (docs/remote.md).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass

from ..errors import ConfigError, InputFileError, ServerUnreachable
from ..util import LRU, scheme_of
from . import endpoint_of, process_options
from .bytestore import ByteStore, Validator
from .clients import split_url, trusted_bundle
from .inflight import MAX_CONCURRENCY, FetchStats, Window, count, gather, submit
from .ranges import merge_gap_of
from .redirects import HANDED, ask, get, handed, target
from .retry import GONE, Deadline, Failure, RemoteError, Replaced, WrongAnswer, classify
from .server import RETRY_SECONDS, TIMEOUT, server_of

log = logging.getLogger(__name__)

#: Bytes of an object's first request: its format, and HDF5's superblock and first object headers.
HEAD_BYTES = 256 * 1024
#: Batches of requests started ahead held at once: the block being read and the next one's.
AHEAD_BATCHES = 2
#: Seconds an object's first bytes and identity are kept, so the registry's guess and the Source share one request.
HEAD_TTL = 10.0

#: nginx's ETag: the file's modification time in seconds and its size, in hex (``"6b09123e-446bacc3"``).
_MTIME_ETAG = re.compile(r'^"([0-9a-f]{1,16})-([0-9a-f]{1,16})"$')


@dataclass(frozen=True, slots=True)
class Identity:
    """What says an object is the run's: its ETag (None if none), its size, and its version id (a versioned bucket)."""

    etag: str | None
    size: int
    version: str | None = None

    def to_list(self) -> list:
        return [self.etag, self.size] if self.version is None else [self.etag, self.size, self.version]

    @classmethod
    def of(cls, value) -> Identity | None:
        if value is None:
            return None
        return cls(value[0], int(value[1]), value[2] if len(value) > 2 else None)


def validator_of(identity: Identity, size: int) -> Validator:
    """What an object's identity can see of a replacement (:class:`Validator`)."""
    etag = identity.etag
    if identity.version:
        return Validator("version", True, f"version id {identity.version}: reads are pinned to it, a replacement "
                                          "is never read")
    if not etag:
        return Validator("size", False, "no ETag: only a replacement of another size is seen; publish under a new "
                                        "name (docs/remote.md, Publishing safely)")
    if etag.startswith("W/"):
        return Validator("weak-etag", False, f"weak ETag {etag}: it says the content is equivalent, not identical; "
                                             "a replacement may not be seen")
    m = _MTIME_ETAG.match(etag)
    if m and int(m.group(2), 16) == size:
        return Validator("mtime-etag", False, f"ETag {etag} is the file's modification time in seconds and its "
                                              "size: a same-size replacement within one second is not seen; "
                                              "publish under a new name, then rename (docs/remote.md)")
    return Validator("etag", True, f"ETag {etag}: every replacement is refused")


class RemoteObject(ByteStore):
    """One object behind a URL, read by concurrent range requests; :meth:`open` fetches its first bytes and ETag."""

    costs_request = True
    #: the client library, imported before a pool's workers start (its runtime starts at the first request)
    worker_modules = ("obstore", "trajscale.storage.objects")

    def __init__(self, url: str, options: dict | None = None, identity: Identity | None = None) -> None:
        if scheme_of(url) is None:
            raise ConfigError(f"{url}: not a URL trajscale reads (s3://, gs://, az://, http://, https://)")
        if "?" in url or "#" in url:   # a presigned URL's query holds credentials: never echoed
            raise InputFileError(url.split("?")[0].split("#")[0] + "?...",
                                 "URLs with a query string (presigned URLs) are not read: give s3://BUCKET/KEY "
                                 "with credentials in the environment, or a plain http(s) URL")
        self.url = url
        self.options = dict(process_options() if options is None else options)
        given = self.options.pop(HANDED, None)
        #: the server's store and outage clock, shared with every other object of it in this process
        self.server = server_of(url, self.options)
        self._own, self._client, self._fs = self.server.own, self.server.client, self.server.fs
        self.retry_seconds, self.timeout = self.server.retry_seconds, self.server.timeout
        fixed = self._own.get("max_concurrency")
        self._slots = Window(MAX_CONCURRENCY if fixed is None else int(fixed), grows=fixed is None)
        self.merge_gap = merge_gap_of(self._own)
        self.protocol, _, self.key = split_url(url)
        if not self.key or self.key.endswith("/"):
            raise InputFileError(url, "a folder, not an object: give the URL of a file in it, or of its segment "
                                      "index (URL/index.json, as trajscale split writes it)")
        if self.protocol != "http" and not url.split("://", 1)[1].split("/", 1)[0]:
            raise InputFileError(url, f"not an object's URL: give {url.split('://')[0]}://BUCKET/KEY")
        self.store = self._store(self.timeout)
        self.stats = FetchStats()
        self._lock = threading.Lock()
        #: requests started ahead (:meth:`prefetch`), by byte range, and the batches they were started in
        self._ahead: dict[tuple[int, int], object] = {}
        self._batches: list[list[tuple[int, int]]] = []
        self._identity = identity
        #: the error every request of the object fails with once one has failed for good
        self._failed: RemoteError | ServerUnreachable | None = None
        self._outage = self.server.outage
        self.head = b""
        if isinstance(given, str) and identity is not None:
            handed(self, given)

    def _store(self, timeout: float):
        return self.server.store(self.url, timeout)

    @classmethod
    def open(cls, url: str, options: dict | None = None, identity: Identity | None = None,
             round_trip: float | None = None) -> RemoteObject:
        """The object at ``url``: with ``identity`` nothing is fetched now; else its first bytes and identity."""
        obj = cls(url, options, identity)
        if round_trip is not None and 0 < round_trip < 3600:
            obj._slots.saw_round_trip(float(round_trip))
        if identity is None:
            obj._identity, obj.head = _head(obj)
        return obj

    @property
    def size(self) -> int:
        return self._identity.size

    def first_bytes(self, n: int) -> bytes:
        # (the head request fetched them: no request more)
        if n <= len(self.head) or len(self.head) >= self.size:
            return self.head[:n]
        return super().first_bytes(n)

    @property
    def identity(self) -> tuple:
        return (self.url, self._identity.etag, self._identity.size)

    @property
    def validator(self) -> Validator:
        return validator_of(self._identity, self._identity.size)

    def state(self) -> dict:
        """What a worker opens this object with, without a request: options (where its URL led), identity,
        shortest round trip."""
        led = handed(self)
        return {"storage_options": {**self.options, HANDED: led} if led else self.options or None,
                "identity": self._identity.to_list(), "round_trip": self.round_trip}

    # where the bytes are (:mod:`.redirects`): the URL asked, what it is kept under, whether the first read asks
    # it (a URL first opened here, of a server not seen answering in place, with no password, proxy nor unchecked
    # certificate: urllib asks it), and the headers of a request where it led (no credential goes there)
    @property
    def resolve_url(self) -> str:
        return self.url

    @property
    def kept_as(self) -> tuple:
        return (self.resolve_url,)

    @property
    def asks_first(self) -> bool:
        return (self.protocol == "http" and self._identity is None and self.server.redirects is not False
                and "@" not in self.url.split("/")[2]
                and not {"proxy_url", "allow_invalid_certificates"} & set(self._client))

    def ask(self, where: str) -> tuple[int, dict, bytes]:
        try:
            return ask(self.url, where, self.options)
        except RemoteError:   # (asked in vain: read as it is, and the read says why it fails)
            return 0, {}, b""

    def target_headers(self, url: str) -> dict:
        return {}

    def fetched(self) -> dict:
        return self.stats.as_dict()

    @property
    def round_trip(self) -> float | None:
        """The shortest wait for a response's headers seen (seconds; None before the first response)."""
        shortest = self._slots.shortest
        return None if shortest == float("inf") else shortest

    @property
    def max_concurrency(self) -> int:
        """Requests in flight at once now (``max_concurrency``, or what the round trip seen so far asks for)."""
        return self._slots.limit

    @property
    def object_identity(self) -> Identity:
        return self._identity

    def stamp(self) -> tuple[str, int, int]:
        import hashlib

        tag = str(self._identity.etag) + (f"@{self._identity.version}" if self._identity.version else "")
        return self.url, self._identity.size, int(hashlib.sha1(tag.encode()).hexdigest()[:15], 16)

    def error(self, problem: str) -> RemoteError:
        return RemoteError(self.url, problem)


    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Each range's bytes, fetched concurrently (at most ``max_concurrency`` at once), each checked."""
        if not ranges:
            return []
        size = self._identity.size
        for a, b in ranges:
            if a < 0 or b > size or b < a:
                raise self.error(f"bytes {a} to {b} are outside the object's {size} bytes: the file is damaged")
        if any(a == b or b <= len(self.head) for a, b in ranges):
            # an empty range needs no request (a server refuses it), nor one within the head request's bytes
            full = [i for i, (a, b) in enumerate(ranges) if b > max(a, len(self.head))]
            got = self.read_ranges([ranges[i] for i in full]) if full else []
            head = memoryview(self.head)
            out: list = [head[a:b] if b <= len(head) else b"" for a, b in ranges]
            for i, data in zip(full, got, strict=True):
                out[i] = data
            return out
        t0 = time.perf_counter()
        try:
            with self._lock:
                early = [self._ahead.pop((a, b), None) for a, b in ranges] if self._ahead else [None] * len(ranges)
            # every request on the request threads: this thread only waits, in slices that look for a stop
            # signal and the object's failure (a request blocks where signals are not seen)
            started = iter(submit(self.max_concurrency, [(self._fetch, (a, b)) for (a, b), f
                                                         in zip(ranges, early, strict=True) if f is None]))
            futures = [f if f is not None else next(started) for f in early]
            got = gather(futures, self._check)
            for f, data in zip(early, got, strict=True):
                if f is not None:   # started ahead: counted now, by the read that takes it
                    self._count_done(len(data))
            return got
        finally:
            self._waited(time.perf_counter() - t0)

    def _waited(self, seconds: float) -> None:
        with self._lock:
            self.stats.wait_s += seconds
        count(wait_s=seconds)

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Start fetching ``ranges`` for the :meth:`read_ranges` asking for them; at most :data:`AHEAD_BATCHES` held."""
        size = self._identity.size
        ranges = [(a, b) for a, b in ranges if 0 <= a <= b <= size]
        if not ranges:
            return
        dropped = []
        with self._lock:
            self._batches = [[r for r in batch if r in self._ahead] for batch in self._batches]
            self._batches = [batch for batch in self._batches if batch]
            while len(self._batches) >= AHEAD_BATCHES:
                dropped += [self._ahead.pop(r) for r in self._batches.pop(0) if r in self._ahead]
        for f in dropped:
            if not f.cancel():
                self._counted_later(f)
        futures = submit(self.max_concurrency, [(self._fetch, (a, b, False, True)) for a, b in ranges])
        ahead = dict(zip(ranges, futures, strict=True))
        with self._lock:
            self._ahead.update(ahead)
            self._batches.append(list(ahead))

    def forget_ahead(self) -> None:
        """Let go of the requests started ahead and not asked for (those not begun are not sent)."""
        with self._lock:
            old, self._ahead, self._batches = self._ahead, {}, []
        for f in old.values():
            if not f.cancel():
                self._counted_later(f)

    def _count_done(self, nbytes: int) -> None:
        """One request answered with ``nbytes``, in this object's and the process's counts."""
        with self._lock:
            self.stats.requests += 1
            self.stats.bytes += nbytes
        count(1, nbytes)

    def _counted_later(self, future) -> None:
        """A request started ahead and let go: counted when it ends (it was sent)."""
        def done(f):
            if not f.cancelled() and f.exception() is None:
                self._count_done(len(f.result()))
        future.add_done_callback(done)

    def _fetch(self, a: int, b: int, first: bool = False, ahead: bool = False):
        """Bytes ``[a, b)``, retried within the request's deadline and its server's outage clock."""
        deadline = Deadline(self.retry_seconds, self.timeout, self._outage)
        while True:
            self._check()
            self._slots.enter(self._check)
            try:
                got = self._get(a, b, first, deadline.try_timeout())
            except (RemoteError, ServerUnreachable) as exc:   # (a redirect asked for: said already)
                self._count_failed()
                if isinstance(exc, Replaced):
                    self._failed = exc
                raise
            except Exception as exc:   # noqa: BLE001 - every client failure is classified here
                self._count_failed()
                failure = classify(exc)
            else:
                self._outage.answered(deadline.sent)
                if not ahead:
                    self._count_done(len(got[0]))
                return got if first else got[0]
            finally:
                self._slots.__exit__()
            if not failure.retry:
                error = self._final(failure, first)
                if isinstance(error, Replaced):
                    self._failed = error
                raise error from None
            deadline.failed(failure)
            if not deadline.wait():
                # the server's clock ran out: the run stops; a request's own alone: this object's failure
                self._failed = (self.server.unreachable(failure, deadline.tries) if deadline.servers()
                                else self._gave_up(failure, deadline.tries))
                raise self._failed from None
            with self._lock:
                self.stats.retries += 1
            count(retries=1)
            log.debug("%s: bytes %d-%d: %s; retry %d", self.url, a, b, failure.kind, deadline.tries)

    def _check(self) -> None:
        """Raise the object's failure, or the server's when it has not answered for ``retry_seconds``."""
        if self._failed is not None:
            raise self._failed
        self.server.check()

    def _count_failed(self) -> None:
        with self._lock:
            self.stats.requests += 1
        count(1)

    def _gave_up(self, failure: Failure, tries: int) -> RemoteError:
        """The error of a request whose retries ran out while its server answered others."""
        how = "gave no usable answer" if failure.kind == "wrong" else "did not answer"
        return self.error(f"{endpoint_of(self.url, self.options)} {how} in {self.retry_seconds:g} s "
                          f"({tries} tries; last: {failure.problem})")

    def _final(self, failure: Failure, first: bool) -> RemoteError:
        """The error of a failure not worth another try, said as what it means."""
        if failure.kind == "replaced":
            return Replaced(self.url, failure.problem)
        if failure.kind == "missing" and not first:   # it was there when the run began (its first request)
            return Replaced(self.url, GONE)
        if failure.kind == "tls":
            return self.error(f"{failure.problem}{self._trust_said()}")
        if failure.kind in ("range", "no_range") and first:
            return self.error(self._empty_said(failure))
        if failure.kind == "missing" and not first and self._identity is not None and self._identity.version:
            # (reads pinned to the version the run began with: GCS answers 404 once another generation replaced it)
            return Replaced(self.url, "the object was replaced or removed during the run (the version it began "
                                      "with is gone); run again on the new object")
        if failure.kind in ("missing", "denied"):   # (a web server refuses a folder's URL: 403 after a redirect)
            folder = self._folder_hint()
            return self.error(f"no object here: {folder}" if folder else failure.problem)
        if failure.kind == "option":
            return self.error(f"{failure.problem}; given: {', '.join(sorted(self.options)) or 'none'}")
        if failure.kind in ("status", "other", "dns", "range"):
            return self.error(f"cannot read it from {endpoint_of(self.url, self.options)} ({failure.problem})")
        return self.error(failure.problem)

    def _trust_said(self) -> str:
        """Which CA bundle was trusted besides the system's (for a certificate refused)."""
        try:
            trust = trusted_bundle(self._own)
        except ConfigError:
            trust = None
        ssl = [f"{v}={os.environ[v]}" for v in ("SSL_CERT_FILE", "SSL_CERT_DIR") if os.environ.get(v)]
        said = ([f"{trust[0]}" + ("" if trust[0].startswith("storage") else f"={os.environ[trust[0]]}")]
                if trust else []) + ssl
        return f" (trusted besides the system's: {', '.join(said)})" if said else ""

    def _empty_said(self, failure: Failure) -> str:
        """What an object whose first bytes were refused is now (a 416, or a whole answer): its size, asked once."""
        import obstore

        try:
            size = int(obstore.head(self.store, self.key).get("size") or 0)
        except Exception:   # noqa: BLE001 - only to say more; the first answer is the one said
            size = None
        if size == 0:
            return ("the object is empty (0 bytes) now: if it is being written, read it once complete "
                    "(publish under a new name, then rename: docs/remote.md)")
        if failure.kind == "no_range":
            return failure.problem
        if size is None:
            return "the server has no bytes at its start (416): it may be being written; read it once complete"
        return f"the server refused its first bytes (416) though it has {size} bytes now: it may have been replaced"

    def _folder_hint(self) -> str:
        """For a missing object: whether it is a folder with a segment index (one request), said ("": not)."""
        import obstore

        try:
            obstore.head(self.store, f"{self.key.rstrip('/')}/index.json")
        except Exception:   # noqa: BLE001 - no index there: no hint
            return ""
        return f"{self.url.rstrip('/')}/ is a folder with a segment index: give {self.url.rstrip('/')}/index.json"

    def _get(self, a: int, b: int, first: bool, timeout: float):
        """One request for bytes ``[a, b)`` within ``timeout`` seconds: (body, etag, total size, version)."""
        options = {"range": (a, b)}
        ident = self._identity
        if not first and ident.etag and not ident.etag.startswith("W/"):   # a weak ETag never matches If-Match
            options["if_match"] = ident.etag
        if not first and ident.version:
            options["version"] = ident.version
        t0 = time.monotonic()
        result = self._send(options, timeout)   # (returns with the response's headers)
        self._slots.saw_round_trip(time.monotonic() - t0)
        raw = result.bytes()   # (a frame's bytes are viewed, not copied: the read copies them once, into its block)
        data = bytes(raw) if first else memoryview(raw)
        meta = result.meta
        return self._checked(data, a, b, meta.get("e_tag"), meta.get("size"), first, meta.get("version"))

    def _send(self, options: dict, timeout: float):
        """One GET of the object with obstore's ``options``, within ``timeout`` seconds (where a redirect led)."""
        import obstore

        kept = target(self) if self.protocol in ("http", "hf") else None
        if kept is not None:
            return get(self, kept, options, timeout)
        return obstore.get(self.store if timeout == self.timeout else self._store(timeout), self.key, options=options)

    def _checked(self, data: bytes, a: int, b: int, etag, total, first: bool, version=None):
        if first:   # the head of a shorter object is shorter
            if total is None:
                raise self.error("the server gave no object size with a range request")
            if len(data) != min(b, total) - a:
                raise WrongAnswer(f"a response of {len(data)} bytes for {min(b, total) - a} asked")
            return data, etag, int(total), version
        ident = self._identity
        if (ident.etag and etag and etag != ident.etag) or (total is not None and int(total) != ident.size):
            raise Replaced(self.url, "the object was replaced during the run (its ETag or size changed); "
                                     "run again on the new object")
        if len(data) != b - a:
            raise WrongAnswer(f"a response of {len(data)} bytes for {b - a} asked")
        return data, etag, total

    def fetch_head(self) -> tuple[Identity, bytes]:
        """The object's identity and first bytes, from one request."""
        t0 = time.perf_counter()
        try:
            data, etag, total, version = gather(submit(1, [(self._fetch, (0, HEAD_BYTES, True))]), self._check)[0]
        finally:
            self._waited(time.perf_counter() - t0)
        return Identity(etag, total, version), data


#: Objects' first bytes and identities (with when they came and the round trip), by URL and options: the last 16.
_HEADS = LRU(16)


def _head(obj: RemoteObject) -> tuple[Identity, bytes]:
    """``obj``'s identity and first bytes: kept :data:`HEAD_TTL` seconds, else fetched."""
    from .clients import _freeze

    key, now = (obj.url, _freeze(obj.options), os.getpid()), time.monotonic()
    kept = _HEADS.peek(key)
    if kept is not None and now - kept[0] < HEAD_TTL:
        # the head request's round trip comes with its bytes: later requests in flight start from it
        if kept[3] is not None:
            obj._slots.saw_round_trip(kept[3])
        return kept[1], kept[2]
    ident, head = obj.fetch_head()
    _HEADS.put(key, (now, ident, head, obj.round_trip))
    return ident, head


def forget_heads() -> None:
    """Forget the first bytes and identities this process keeps: the next open of a URL asks its server again."""
    _HEADS.clear()


__all__ = ["AHEAD_BATCHES", "HEAD_BYTES", "HEAD_TTL", "RETRY_SECONDS", "TIMEOUT", "FetchStats", "Identity",
           "RemoteError", "RemoteObject", "Replaced", "forget_heads", "validator_of"]
