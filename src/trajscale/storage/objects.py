"""Byte stores: a file's size and identity, and its bytes by ranges, local or behind a URL.

:class:`RemoteObject` reads an object with range requests through obstore
(Rust's ``object_store``: ``S3Store`` for ``s3://``, ``HTTPStore`` for
``http(s)://``), many at once from a pool of threads (obstore releases the GIL
while a request waits). Every
response is checked before it is used: a range answered with other bytes than
asked for (a short body, a server that ignores ``Range``) is never used, and
every request asks for the object's ETag (``If-Match``), so an object replaced
during a run is refused, not mixed with the old one. Timeouts, dropped
connections, 5xx answers and throttling (``SlowDown``) are retried with
exponential backoff within ``retry_seconds``; requests, bytes, seconds spent
waiting on the network and retries are counted (:class:`FetchStats`) for the
RunReport.

Why obstore rather than fsspec/s3fs: fetching the same 1,000 ranges of 60 kB
from the same local S3 server, obstore took well under a second and s3fs's
``cat_ranges`` minutes (docs/remote.md has the measurement and its command).
The options stay fsspec's ``storage_options``, as xarray, Dask and pandas
users pass them, translated here to obstore's names.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass

from ..errors import ConfigError, InputFileError
from . import OWN_OPTIONS, current_options, endpoint_of, is_url, shown

log = logging.getLogger(__name__)

#: Bytes of an object's first request: the format is told from them, and HDF5's superblock and first
#: object headers are in them (they are the caching file object's first block).
HEAD_BYTES = 256 * 1024
#: Defaults of trajscale's own options.
RETRY_SECONDS = 30.0
TIMEOUT = 20.0
#: Requests in flight at once per object and process, at least (``max_concurrency`` fixes the number). 64
#: rather than 32: the benchmark's 1,000 CA spans (40 kB, one a frame) through a 20 ms, 100 MB/s link took
#: 0.75x the time (paired whole runs, docs/benchmarks.md); a plain client replaying them was no faster at 128.
MAX_CONCURRENCY = 64
#: Without ``max_concurrency``, the requests in flight grow with the link's round trip (the shortest wait
#: for a response's headers seen so far), to keep about this many requests a second going out: a round
#: trip of 100 ms needs 250 in flight for what 64 do at 20 ms. Half the 5,500 GETs a second S3 serves a key
#: prefix before it answers SlowDown, so that two processes on one object stay within it.
REQUESTS_PER_SECOND = 2500
#: ... and at most this many.
MOST_CONCURRENCY = 256
#: Two ranges with fewer bytes than this between them are fetched in one request (``merge_gap``). The rule
#: is a cost: merge only where moving the gap's bytes costs less than a request, gap < bandwidth x the
#: request's latency. The requests go out concurrently, so one more request costs about its latency
#: shared by those in flight: 100 MB/s x 20 ms / 32 is 62.5 kB (31 kB over 64). A larger gap
#: fetches the bytes between a selection's spans in consecutive frames (most of each frame for a CA
#: selection of a 570 kB frame) and saves requests that were nearly free.
MERGE_GAP = 64 * 1024
#: Batches of requests started ahead (:meth:`RemoteObject.prefetch`) held at once: the block being read and
#: the next one's.
AHEAD_BATCHES = 2
#: Seconds an object's first bytes and identity are kept, so the registry's guess and the Source's open
#: share one request (a later run asks again: the object may have been replaced since).
HEAD_TTL = 10.0


class RemoteError(InputFileError):
    """An object that cannot be read: missing, denied, replaced, or its server unreachable."""


class Replaced(RemoteError):
    """The object changed (another ETag or size) since the run first read it."""


@dataclass(slots=True)
class FetchStats:
    """What reading an object cost this process: requests, bytes, seconds waiting on them, retries."""

    requests: int = 0
    bytes: int = 0
    wait_s: float = 0.0
    retries: int = 0

    def as_dict(self) -> dict:
        return {"requests": self.requests, "bytes": self.bytes, "wait_s": self.wait_s, "retries": self.retries}


#: Every object's requests in this process together (what :func:`trajscale.storage.fetched_here` reads: the
#: requests of the process that prepares a run, whichever objects made them, the registry's look included).
PROCESS_STATS = FetchStats()
_PROCESS_LOCK = threading.Lock()


def _count(requests: int = 0, nbytes: int = 0, wait_s: float = 0.0, retries: int = 0) -> None:
    with _PROCESS_LOCK:
        PROCESS_STATS.requests += requests
        PROCESS_STATS.bytes += nbytes
        PROCESS_STATS.wait_s += wait_s
        PROCESS_STATS.retries += retries


@dataclass(frozen=True, slots=True)
class Identity:
    """What says an object is the one a run began with: its ETag (None if the server gives none) and size."""

    etag: str | None
    size: int

    def to_list(self) -> list:
        return [self.etag, self.size]

    @classmethod
    def of(cls, value) -> Identity | None:
        return None if value is None else cls(value[0], int(value[1]))


class ByteStore(ABC):
    """A file's bytes: its size, its identity, and ranges of it."""

    @property
    @abstractmethod
    def size(self) -> int: ...

    @property
    @abstractmethod
    def identity(self) -> tuple: ...

    @abstractmethod
    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes ``[start, stop)`` of each range, in order; every one exactly that long, or an error."""

    @abstractmethod
    def stamp(self) -> tuple[str, int, int]:
        """(name, size, version): what a resume records of an input to know it again; the version is a
        local file's modification time, an object's ETag as a number."""

    #: Ranges closer than this are read as one (:data:`MERGE_GAP`; an object's ``merge_gap`` option).
    merge_gap: int = MERGE_GAP


class LocalFile(ByteStore):
    """A local file read with ``pread`` (the local twin of :class:`RemoteObject`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        st = os.stat(path)
        self._identity = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        self._size = st.st_size

    @property
    def size(self) -> int:
        return self._size

    @property
    def identity(self) -> tuple:
        return self._identity

    def stamp(self) -> tuple[str, int, int]:
        return self._identity[0], self._size, self._identity[4]

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            out = [os.pread(fd, b - a, a) for a, b in ranges]
        finally:
            os.close(fd)
        for (a, b), data in zip(ranges, out, strict=True):
            if len(data) != b - a:
                raise InputFileError(self.path, f"short read at byte {a}: the file is truncated")
        return out


def split_options(options: dict | None) -> tuple[dict, dict]:
    """(trajscale's own options, the filesystem's) from one ``storage_options`` dict."""
    opts = dict(current_options() if options is None else options)
    own = {k: opts.pop(k) for k in OWN_OPTIONS if k in opts}
    return own, opts


def merge_gap_of(options: dict | None) -> int:
    """The ``merge_gap`` of these storage options (bytes, :data:`MERGE_GAP` if not given); a negative or
    non-integer value is refused in one line."""
    value = (options or {}).get("merge_gap", MERGE_GAP)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != int(value):
        raise ConfigError(f"storage option merge_gap: give a number of bytes, 0 or more (got {value!r})")
    return int(value)


def _require(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"reading a URL needs {module.split('.')[0]}: pip install 'trajscale[remote]'") from None


_STORES: dict[tuple, object] = {}
_STORES_LOCK = threading.Lock()


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


#: fsspec/s3fs option names -> obstore's S3 configuration keys.
S3_NAMES = {"key": "access_key_id", "secret": "secret_access_key", "token": "session_token",
            "endpoint_url": "endpoint", "region_name": "region"}


def s3_config(fs_options: dict) -> dict:
    """obstore's S3 configuration from fsspec-style options (``anon``, ``key``/``secret``/``token``,
    ``endpoint_url``, ``client_kwargs``' endpoint and region, ``profile``), obstore's own keys kept.
    What is not given comes from the AWS environment (``AWS_ENDPOINT_URL`` included)."""
    opts = dict(fs_options)
    client = dict(opts.pop("client_kwargs", None) or {})
    opts.pop("config_kwargs", None)
    config = {}
    if opts.pop("anon", False):
        config["skip_signature"] = True
    for name in ("endpoint_url", "region_name"):
        if name in client:
            opts.setdefault(name, client.pop(name))
    for k, v in opts.items():
        config[S3_NAMES.get(k, k)] = v
    if "endpoint" not in config:
        env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if env:
            config["endpoint"] = env
    return config


def object_store(protocol: str, url: str, fs_options: dict, timeout: float):
    """The obstore store for an object (one per process, location and options: its connection pool is
    reused), with its own retries off: trajscale retries and counts them."""
    root = url.split("/", 3)[2] if protocol == "s3" else url
    key = (protocol, root, os.getpid(), _freeze(fs_options), timeout)
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is not None:
            return store
        _require("obstore")
        from datetime import timedelta

        from obstore.store import HTTPStore, S3Store

        client = {"timeout": f"{timeout:g}s", "connect_timeout": f"{min(timeout, 10.0):g}s"}
        retry = {"max_retries": 0, "retry_timeout": timedelta(seconds=timeout)}
        if protocol == "s3":
            config = s3_config(fs_options)
            provider = _profile_credentials(config, config.pop("profile", None))
            if str(config.get("endpoint", "")).startswith("http://"):
                client["allow_http"] = True
            try:
                store = S3Store(root, config=config, client_options=client, retry_config=retry,
                                credential_provider=provider)
            except Exception as exc:   # noqa: BLE001 - obstore's configuration errors, said in one line
                raise ConfigError(f"s3://{root}: storage options not accepted ({_first_line(exc)}); "
                                  f"given: {shown(fs_options)}") from None
        else:
            if url.startswith("http://"):
                client["allow_http"] = True
            store = HTTPStore.from_url(url.rsplit("/", 1)[0], client_options=client, retry_config=retry)
        _STORES[key] = store
        return store


def _profile_credentials(config: dict, profile: str | None):
    """Credentials from an AWS profile (``~/.aws/credentials`` and ``~/.aws/config``, SSO and assumed roles
    included, through boto3), as the AWS tools find them: the ``profile`` option, else ``AWS_PROFILE``, else
    the shared files' default where neither the options nor the environment hold a key (obstore alone reads
    the environment's keys and the instance's role, not the shared files). None: obstore's own chain. A
    profile's region fills in a region not given. A named profile without boto3 or without credentials is
    refused in one line."""
    named = profile or os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE")
    if not named and (config.get("skip_signature") or "access_key_id" in config
                      or os.environ.get("AWS_ACCESS_KEY_ID")):
        return None
    if named:
        boto3 = _require("boto3")
    else:
        shared = os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials")
        config_file = os.environ.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config")
        if not (os.path.exists(shared) or os.path.exists(config_file)):
            return None
        try:
            import boto3
        except ImportError:   # the shared files need boto3; without it, obstore's chain
            return None
    try:
        session = boto3.Session(profile_name=named or None)
        creds = session.get_credentials()
    except Exception as exc:   # noqa: BLE001 - botocore's profile errors, said in one line
        raise ConfigError(f"AWS profile {named or 'default'!r}: {_first_line(exc)}") from None
    if creds is None:
        if named:
            raise ConfigError(f"AWS profile {named!r} has no credentials")
        return None
    if "region" not in config and session.region_name and not (
            os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        config["region"] = session.region_name

    def provide():
        frozen = creds.get_frozen_credentials()
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                "token": frozen.token, "expires_at": None}

    return provide


_POOL = None
_POOL_PID = 0
_POOL_LOCK = threading.Lock()


def _pool(n: int):
    """The process's request threads (obstore's calls release the GIL while they wait; started as requests
    come, up to :data:`MOST_CONCURRENCY` or ``n``; each object's window lets its share go out), at least
    ``n``: a pool asked for more threads than it has is replaced (the old one's requests still run, then
    its threads end)."""
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid() or _POOL._max_workers < n:
            from concurrent.futures import ThreadPoolExecutor

            if _POOL is not None and _POOL_PID == os.getpid():
                _POOL.shutdown(wait=False)
            _POOL = ThreadPoolExecutor(max_workers=max(n, MOST_CONCURRENCY), thread_name_prefix="trajscale-fetch")
            _POOL_PID = os.getpid()
        return _POOL


class _Window:
    """At most ``limit`` requests of an object in flight at once; a window that ``grows`` takes its limit from
    the shortest round trip seen (:data:`REQUESTS_PER_SECOND` x it, from :data:`MAX_CONCURRENCY` to
    :data:`MOST_CONCURRENCY`); the shortest, not the latest, so the queueing its own requests cause at a
    server does not widen it further."""

    def __init__(self, limit: int, grows: bool) -> None:
        self.limit, self.grows = limit, grows
        self._held = 0
        self.shortest = float("inf")
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        with self._cond:
            while self._held >= self.limit:
                self._cond.wait()
            self._held += 1

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._held -= 1
            self._cond.notify()

    def saw_round_trip(self, seconds: float) -> None:
        if seconds >= self.shortest:
            return
        with self._cond:
            self.shortest = min(self.shortest, seconds)
            if not self.grows:
                return
            limit = min(MOST_CONCURRENCY, max(MAX_CONCURRENCY, math.ceil(REQUESTS_PER_SECOND * self.shortest)))
            if limit > self.limit:
                self._cond.notify_all()
            self.limit = limit


class _Retry(Exception):
    """A failure worth another try (timeout, dropped connection, 5xx, throttling, a short body)."""


_ADDRESSES = None


def _without_addresses(text: str) -> str:
    """``text`` without URLs and host:port pairs: a port such as 35037 must not read as a 503, nor 41234
    as a 412."""
    global _ADDRESSES
    if _ADDRESSES is None:
        import re

        _ADDRESSES = re.compile(r"\S*://\S*|\b[\w.-]+:\d+\b")
    return _ADDRESSES.sub(" ", text)


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, ConnectionError, _Retry)):
        return True
    text = _without_addresses(" ".join(str(e) for e in _chain(exc)))
    return any(w in text for w in ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout",
                                   "Throttl", "503", "500 ", "502", "504", "Service Unavailable",
                                   "Internal Server Error", "Bad Gateway", "Gateway Timeout", "timed out",
                                   "Timeout", "Connection refused", "connection closed", "Connection reset",
                                   "error sending request", "error trying to connect", "broken pipe",
                                   "IncompleteMessage", "unexpected EOF", "error decoding response body",
                                   "connection error", "tcp connect error", "dns error"))


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _status(text: str, code: int) -> bool:
    """Whether ``text`` names the HTTP status ``code``: as a number of its own, not part of an ID, a
    version or a duration (obstore's messages say how long a request took: "in 412ms")."""
    import re

    return re.search(rf"(?<![\w.]){code}(?![\w.]|\s*ms\b)", text) is not None


_REPLACED = "the object was replaced during the run (its ETag changed); run again on the new object"
_NO_KEY = "no such object (the key does not exist)"
_DENIED = "access denied (the credentials may not read this object)"
_EMPTY = "the object is empty"


def _problem(exc: BaseException) -> str | None:
    """What a non-retryable failure means for the user (None: not one of the known ones); the error's
    own names first, a bare status number last."""
    name = type(exc).__name__
    text = _without_addresses(f"{name} {exc}")
    if name == "PreconditionError" or "PreconditionFailed" in text:
        return _REPLACED
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return "no such bucket"
    if name == "NotFoundError" or "NoSuchKey" in text:
        return _NO_KEY
    if "InvalidAccessKeyId" in text or "SignatureDoesNotMatch" in text or name == "UnauthenticatedError":
        return "access denied: the credentials are not valid for this endpoint (check the access key and secret)"
    if "credential" in text.lower() and "missing" in text.lower():
        return ("no credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or "
                "--storage-option anon=true for a public bucket")
    if name == "PermissionDeniedError" or "AccessDenied" in text or "Forbidden" in text:
        return _DENIED
    if "InvalidRange" in text or "Range started at" in text:
        return _EMPTY
    return next((why for code, why in ((412, _REPLACED), (404, _NO_KEY), (403, _DENIED), (416, _EMPTY))
                 if _status(text, code)), None)


class RemoteObject(ByteStore):
    """One object behind a URL, read by concurrent range requests.

    Use :meth:`open`: it fetches the object's first :data:`HEAD_BYTES` with one request, which also
    gives its ETag and size (or takes a known ``identity``, a worker's, and checks it on every read).
    """

    def __init__(self, url: str, options: dict | None = None, identity: Identity | None = None) -> None:
        if not is_url(url):
            raise ConfigError(f"{url}: not a URL trajscale reads (s3://, http://, https://)")
        if "?" in url or "#" in url:   # a presigned URL's query holds credentials: never echoed
            raise InputFileError(url.split("?")[0].split("#")[0] + "?...",
                                 "URLs with a query string (presigned URLs) are not read: give s3://BUCKET/KEY "
                                 "with credentials in the environment, or a plain http(s) URL")
        own, fs_options = split_options(options)
        self.url = url
        self.options = dict(current_options() if options is None else options)
        self.retry_seconds = float(own.get("retry_seconds", RETRY_SECONDS))
        self.timeout = float(own.get("timeout", TIMEOUT))
        fixed = own.get("max_concurrency")
        self._slots = _Window(MAX_CONCURRENCY if fixed is None else max(1, int(fixed)), grows=fixed is None)
        self.merge_gap = merge_gap_of(own)
        self.protocol = "s3" if url.startswith("s3://") else "http"
        if self.protocol == "s3":
            bucket, _, self.key = url[5:].partition("/")
            if not bucket or not self.key:
                raise InputFileError(url, "not an object's URL: give s3://BUCKET/KEY")
        else:
            self.key = url.rsplit("/", 1)[1]
            if not self.key:
                raise InputFileError(url, "not an object's URL (it ends with /)")
        self.store = object_store(self.protocol, url, fs_options, self.timeout)
        self.stats = FetchStats()
        self._lock = threading.Lock()
        #: requests started ahead of the read that will want them (:meth:`prefetch`), by byte range, and the
        #: batches they were started in (at most :data:`AHEAD_BATCHES`)
        self._ahead: dict[tuple[int, int], object] = {}
        self._batches: list[list[tuple[int, int]]] = []
        self._identity = identity
        self._failed: RemoteError | None = None
        self.head = b""

    @classmethod
    def open(cls, url: str, options: dict | None = None, identity: Identity | None = None,
             round_trip: float | None = None) -> RemoteObject:
        """The object at ``url``: with ``identity`` (from the process that began the run) nothing is
        fetched now; without, its first bytes and identity, from one request (shared for a few seconds
        with the process's other opens of the same URL and options). ``round_trip``: the shortest that
        process saw (:attr:`round_trip`), what the requests in flight start from."""
        obj = cls(url, options, identity)
        if round_trip is not None and 0 < round_trip < 3600:
            obj._slots.saw_round_trip(float(round_trip))
        if identity is None:
            obj._identity, obj.head = _heads.get(obj)
        return obj

    @property
    def size(self) -> int:
        return self._identity.size

    @property
    def identity(self) -> tuple:
        return (self.url, self._identity.etag, self._identity.size)

    def state(self) -> dict:
        """What a worker opens this object with, without a request: the options it is read with, its
        identity, and the shortest round trip seen (the requests in flight start from it)."""
        return {"storage_options": self.options or None, "identity": self._identity.to_list(),
                "round_trip": self.round_trip}

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

        return self.url, self._identity.size, int(hashlib.sha1(str(self._identity.etag).encode()).hexdigest()[:15], 16)

    def error(self, problem: str) -> RemoteError:
        return RemoteError(self.url, problem)

    # -- fetching

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Each range's bytes, fetched concurrently (at most ``max_concurrency`` at once), each checked."""
        if not ranges:
            return []
        size = self._identity.size
        for a, b in ranges:
            if a < 0 or b > size or b < a:
                raise self.error(f"bytes {a} to {b} are outside the object's {size} bytes: the file is damaged")
        t0 = time.perf_counter()
        try:
            with self._lock:
                early = [self._ahead.pop((a, b), None) for a, b in ranges] if self._ahead else [None] * len(ranges)
            if len(ranges) == 1 and early[0] is None:
                return [self._fetch(*ranges[0])]
            pool = _pool(self.max_concurrency)
            futures = [f if f is not None else pool.submit(self._fetch, a, b)
                       for (a, b), f in zip(ranges, early, strict=True)]
            try:
                got = [f.result() for f in futures]
                for f, data in zip(early, got, strict=True):
                    if f is not None:   # started ahead: counted now, by the read that takes it
                        self._count_done(len(data))
                return got
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        finally:
            waited = time.perf_counter() - t0
            with self._lock:
                self.stats.wait_s += waited
            _count(wait_s=waited)

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Start fetching ``ranges`` now, for the :meth:`read_ranges` call that will ask for exactly them (the
        next block's, started as the block before it is read and mapped). At most :data:`AHEAD_BATCHES`
        batches are held: the oldest one's ranges not asked for are let go (its requests still count).
        A failure is the later read's."""
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
        pool = _pool(self.max_concurrency)
        ahead = {(a, b): pool.submit(self._fetch, a, b, False, True) for a, b in ranges}
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
        _count(1, nbytes)

    def _counted_later(self, future) -> None:
        """A request started ahead and let go: counted when it ends (it was sent)."""
        def done(f):
            if not f.cancelled() and f.exception() is None:
                self._count_done(len(f.result()))
        future.add_done_callback(done)

    def _fetch(self, a: int, b: int, first: bool = False, ahead: bool = False):
        """Bytes ``[a, b)`` (``first``: the head request, which learns the identity), retried for
        ``retry_seconds`` from its first failure; once one request of the object has failed for good, the
        others fail at once with its error (a server that died ends a batch of a thousand ranges within one
        budget, not one per range). A request started ahead (``ahead``) is counted when a read takes its
        bytes, so that the read's task counts it (its failures and retries at once)."""
        deadline = None
        delay, tries = 0.1, 0
        while True:
            if self._failed is not None:
                raise self._failed
            try:
                with self._slots:
                    got = self._get(a, b, first)
                if not ahead:
                    self._count_done(len(got[0]))
                return got if first else got[0]
            except RemoteError:
                with self._lock:
                    self.stats.requests += 1
                _count(1)
                raise
            except Exception as exc:   # noqa: BLE001 - every client failure is classified here
                with self._lock:
                    self.stats.requests += 1
                _count(1)
                problem = None if _retryable(exc) else _problem(exc)
                if problem is not None:
                    raise (Replaced if "replaced" in problem else RemoteError)(self.url, problem) from None
                if not _retryable(exc):
                    raise self.error(f"cannot read it from {endpoint_of(self.url, self.options)} "
                                     f"({type(exc).__name__}: {_first_line(exc)})") from None
                if deadline is None:
                    deadline = time.monotonic() + self.retry_seconds
                left = deadline - time.monotonic()
                if left <= 0:
                    # a wrong answer is said as ours (_Retry's text); a client's failure with its own name
                    how = ("gave no usable answer" if isinstance(exc, _Retry) else "did not answer")
                    last = _first_line(exc) if isinstance(exc, _Retry) else f"{type(exc).__name__}: {_first_line(exc)}"
                    self._failed = self.error(f"{endpoint_of(self.url, self.options)} {how} in "
                                              f"{self.retry_seconds:g} s ({tries + 1} tries; last: {last})")
                    raise self._failed from None
                tries += 1
                with self._lock:
                    self.stats.retries += 1
                _count(retries=1)
                log.debug("%s: bytes %d-%d: %s; retry %d", self.url, a, b, type(exc).__name__, tries)
                time.sleep(min(left, delay * (0.5 + random.random())))
                delay = min(delay * 2, 5.0)

    def _get(self, a: int, b: int, first: bool):
        """One request for bytes ``[a, b)``: (body, etag, total size)."""
        import obstore

        options = {"range": (a, b)}
        if not first and self._identity.etag:
            options["if_match"] = self._identity.etag
        t0 = time.monotonic()
        result = obstore.get(self.store, self.key, options=options)   # (returns with the response's headers)
        self._slots.saw_round_trip(time.monotonic() - t0)
        raw = result.bytes()   # (a frame's bytes are viewed, not copied: the read copies them once, into its block)
        data = bytes(raw) if first else memoryview(raw)
        meta = result.meta
        return self._checked(data, a, b, meta.get("e_tag"), meta.get("size"), first)

    def _checked(self, data: bytes, a: int, b: int, etag, total, first: bool):
        if first:   # the head of a shorter object is shorter
            if total is None:
                raise self.error("the server gave no object size with a range request")
            if len(data) != min(b, total) - a:
                raise _Retry(f"a response of {len(data)} bytes for {min(b, total) - a} asked")
            return data, etag, int(total)
        ident = self._identity
        if (ident.etag and etag and etag != ident.etag) or (total is not None and int(total) != ident.size):
            raise Replaced(self.url, "the object was replaced during the run (its ETag or size changed); "
                                     "run again on the new object")
        if len(data) != b - a:
            raise _Retry(f"a response of {len(data)} bytes for {b - a} asked")
        return data, etag, total

    def fetch_head(self) -> tuple[Identity, bytes]:
        """The object's identity and first bytes, from one request."""
        t0 = time.perf_counter()
        try:
            data, etag, total = self._fetch(0, HEAD_BYTES, True)
        finally:
            waited = time.perf_counter() - t0
            self.stats.wait_s += waited
            _count(wait_s=waited)
        return Identity(etag, total), data

    def check_unchanged(self) -> None:
        """Refuse (:class:`Replaced`) if the object is no longer the one the run began with (one request)."""
        ident, _ = self.fetch_head()
        if ident != self._identity:
            raise Replaced(self.url, "the object was replaced during the run (its ETag or size changed); "
                                     "run again on the new object")


def _total(content_range, length) -> int | None:
    if content_range and "/" in content_range:
        tail = content_range.rsplit("/", 1)[1].strip()
        if tail.isdigit():
            return int(tail)
    return None if length is None else int(length)


def _first_line(exc: BaseException) -> str:
    """The first line of a failure's text, at most 200 characters; a server's XML error body (S3's) is
    given as its code and message, not cut mid-tag."""
    text = str(exc).strip()
    if "<?xml" in text or "<Error>" in text:
        import re

        code = re.search(r"<Code>([^<]{1,80})</Code>", text)
        message = re.search(r"<Message>([^<]{1,160})</Message>", text)
        head = text.split("<", 1)[0].strip().rstrip(":").strip()
        head = head.rsplit("status code:", 1)[-1].strip()   # (obstore's "... status code: 500 Internal ...")
        said = ": ".join(m.group(1) for m in (code, message) if m)
        if said:   # the server's words whole, after as much of the client's as fits
            return f"{head.splitlines()[0][:120]}: {said}" if head else said
    return text.splitlines()[0][:200] if text else "no details"


class _Heads:
    """Objects' first bytes and identities, kept :data:`HEAD_TTL` seconds per URL and options."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple, tuple[float, Identity, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, obj: RemoteObject) -> tuple[Identity, bytes]:
        key = (obj.url, _freeze(obj.options), os.getpid())
        now = time.monotonic()
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and now - kept[0] < HEAD_TTL:
                return kept[1], kept[2]
        ident, head = obj.fetch_head()
        with self._lock:
            self._kept[key] = (now, ident, head)
            while len(self._kept) > 16:
                self._kept.popitem(last=False)
        return ident, head

    def forget(self) -> None:
        with self._lock:
            self._kept.clear()


_heads = _Heads()


def head(url: str, n: int) -> bytes:
    """The first ``n`` (at most :data:`HEAD_BYTES`) bytes of the object at ``url``: what the registry
    tells its format from (one request, shared with the Source that opens it next)."""
    return RemoteObject.open(url).head[:n]


def coalesce(ranges: list[tuple[int, int]], gap: int,
             max_request: int | None = None) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Ranges sorted and merged where they are at most ``gap`` bytes apart (a request saved costs more
    than ``gap`` bytes moved) and the merged one stays within ``max_request``: (merged ranges, for each
    input range its (merged index, offset in it))."""
    order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    merged: list[list[int]] = []
    where: list[tuple[int, int]] = [(0, 0)] * len(ranges)
    for i in order:
        a, b = ranges[i]
        if merged and a - merged[-1][1] <= gap and (max_request is None or max(b, merged[-1][1])
                                                      - merged[-1][0] <= max_request):
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
        where[i] = (len(merged) - 1, a - merged[-1][0])
    return [(a, b) for a, b in merged], where


def requests_of(ranges: list[tuple[int, int]], gap: int, max_request: int | None = None):
    """The requests :func:`read_coalesced` sends for ``ranges``: (merged ranges, each range's place in them,
    the requests, each request's merged range)."""
    merged, where = coalesce(ranges, gap, max_request)
    pieces, owner = [], []
    for m, (a, b) in enumerate(merged):
        step = b - a if not max_request else max_request
        for x in range(a, b, max(1, step)):
            pieces.append((x, min(b, x + step)))
            owner.append(m)
    return merged, where, pieces, owner


def prefetch_coalesced(store: ByteStore, ranges: list[tuple[int, int]], gap: int,
                       max_request: int | None = None) -> None:
    """Start fetching the requests :func:`read_coalesced` will send for ``ranges`` (a store that cannot read
    ahead: nothing)."""
    ahead = getattr(store, "prefetch", None)
    if ahead is not None and ranges:
        ahead(requests_of(ranges, gap, max_request)[2])


def read_coalesced(store: ByteStore, ranges: list[tuple[int, int]], gap: int,
                   max_request: int | None = None) -> list[memoryview]:
    """Each range's bytes, read as :func:`coalesce` merges them; a range longer than ``max_request``
    goes out as several concurrent requests."""
    merged, where, pieces, owner = requests_of(ranges, gap, max_request)
    got = store.read_ranges(pieces)
    firsts: list[int] = []   # each merged range's first request
    for i, m in enumerate(owner):
        if m == len(firsts):
            firsts.append(i)
    out = []
    for (m, off), (a, b) in zip(where, ranges, strict=True):
        # the range within its merged range's requests (each ``max_request`` long but the last): a view of
        # one request's bytes, or the pieces it spans joined (no whole merged range is ever copied)
        start = merged[m][0] + off
        i = firsts[m] + ((off // max_request) if max_request else 0)
        lo = start - pieces[i][0]
        if b - a <= pieces[i][1] - start:
            out.append(memoryview(got[i])[lo:lo + (b - a)])
            continue
        parts, left = [], b - a
        while left > 0:
            take = memoryview(got[i])[lo:lo + left]
            parts.append(take)
            left -= len(take)
            i, lo = i + 1, 0
        out.append(memoryview(b"".join(parts)))
    return out


def open_bytes(path: str | os.PathLike) -> ByteStore:
    """The bytes of ``path``: a local file, or the object behind a URL (its first request tells its size
    and identity)."""
    return RemoteObject.open(path) if is_url(path) else LocalFile(os.fspath(path))
