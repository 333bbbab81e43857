"""Where an http(s) URL's bytes are: a URL that redirects (a Hub's resolve URL, a link to signed storage) is asked
once a file without following, and the target kept by the process and handed to its workers (:data:`HANDED`),
so ranges go straight to it, not through the redirect each; a target refused (expired) is asked for again, once.
A server whose first file answered in place is read in place. Requests are retried on the server's clock.
"""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from urllib.parse import urljoin

from .clients import _build, _client, trusted_bundle
from .retry import Deadline, Failure, RemoteError, _status_problem, classify, first_line

log = logging.getLogger(__name__)

#: The storage option a worker is handed a file's target in (by the object's ``state()``; taken out at once).
HANDED = "resolved_url"
#: Refusals of a kept target that ask its URL again (and 410 Gone).
REFUSED = ("denied", "unauthenticated", "missing")


def user_agent() -> str:
    from .._version import __version__

    return f"trajscale/{__version__}"


def _opener(options: dict):
    """urllib's opener that hands a redirect back rather than follow it, trusting what a read trusts."""
    import ssl
    import urllib.request

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    trust = trusted_bundle({k: v for k, v in options.items() if k == "ca_bundle"})
    context = ssl.create_default_context(cadata=trust[1]) if trust else None
    return urllib.request.build_opener(Keep, urllib.request.HTTPSHandler(context=context))


def ask(url: str, where: str, options: dict, method: str = "HEAD", headers: dict | None = None):
    """``where``'s answer (asked for ``url``'s sake), a redirect not followed: (status, lower-cased headers,
    body); no answer, 5xx, 408 and 429 tried again as a read is, on ``url``'s server's clock (``Retry-After``
    waited out)."""
    import http.client
    import urllib.error
    import urllib.request

    from .inflight import count
    from .server import server_of

    server = server_of(url, options)
    deadline = Deadline(server.retry_seconds, server.timeout, server.outage)
    headers = {"User-Agent": user_agent(), **(headers or {})}
    while True:
        server.check()
        t0, status, got, body = time.perf_counter(), None, {}, b""
        try:
            with _opener(options).open(urllib.request.Request(where, method=method, headers=headers),
                                       timeout=deadline.try_timeout()) as r:
                status, got, body = r.status, r.headers, r.read()
        except urllib.error.HTTPError as exc:   # (a refusal, and a redirect not followed)
            status, got = exc.code, exc.headers or {}
        except http.client.HTTPException as exc:   # (cut mid-answer)
            failure = Failure("cut", f"no whole answer ({first_line(exc)})")
        except OSError as exc:   # (refused, reset, timed out; a name or certificate refused: said at once)
            failure = classify(exc.reason if isinstance(getattr(exc, "reason", None), OSError) else exc)
            if not failure.retry:
                raise RemoteError(url, f"{server.endpoint}: {failure.problem}") from None
        got = {k.lower(): v for k, v in dict(got).items()}
        count(1, wait_s=time.perf_counter() - t0, retries=int(deadline.tries > 1))
        if status is not None:
            failure = _status_problem(status, got.get("x-error-code"))
            if not failure.retry:
                server.outage.answered(deadline.sent)
                return status, got, body
        deadline.failed(failure)
        if not deadline.wait(got.get("retry-after") if status in (429, 503) else None):
            if deadline.servers():
                raise server.unreachable(failure, deadline.tries)
            raise RemoteError(url, f"{server.endpoint} gave no usable answer in {server.retry_seconds:g} s "
                                   f"({deadline.tries} tries; last: {failure.problem})")


def _target(url: str) -> SimpleNamespace:
    """Where a file's bytes are, and the http stores reading it, by timeout."""
    return SimpleNamespace(url=url, stores={})


_TARGETS: dict[tuple, SimpleNamespace] = {}
_LOCK = threading.Lock()
_RESOLVING: dict[tuple, threading.Lock] = {}


def handed(obj, url: str | None = None) -> str | None:
    """What a worker is handed of ``obj``'s target (None: nothing kept, or the URL itself); kept: ``url``, handed."""
    with _LOCK:
        kept = _TARGETS.setdefault(obj.kept_as, _target(url)) if url else _TARGETS.get(obj.kept_as)
    return kept.url if kept is not None and kept.url != obj.url else None


def target(obj, refused: SimpleNamespace | None = None) -> SimpleNamespace | None:
    """Where ``obj``'s bytes are: kept by the process; asked when none is kept and ``obj`` asks first
    (``asks_first``), or ``refused`` is; None: ``obj``'s own URL (read as it is)."""
    key = obj.kept_as
    with _LOCK:
        kept = _TARGETS.get(key)
        if kept is None and refused is None and not obj.asks_first:
            return None
        if kept is not None and kept is not refused:
            return kept if kept.url != obj.url else None
        lock = _RESOLVING.setdefault(key, threading.Lock())
    with lock:   # (one ask at a time a file: requests waiting for it take its answer)
        try:
            with _LOCK:
                kept = _TARGETS.get(key)
            if kept is None or kept is refused:
                kept = _target(_resolve(obj, obj.resolve_url))
                obj.server.redirects = kept.url != obj.resolve_url
                if kept.url == obj.url:   # (answered in place: nothing to keep, the URL is read as it is)
                    return None
                with _LOCK:
                    _TARGETS[key] = kept
                    while len(_TARGETS) > 4096:
                        _TARGETS.pop(next(iter(_TARGETS)))
        finally:   # (the lock goes with the ask: those waiting hold it, a later one finds the target kept)
            with _LOCK:
                _RESOLVING.pop(key, None)
    return kept if kept.url != obj.url else None


def _resolve(obj, where: str) -> str:
    for _ in range(4):   # (a relative redirect is the server's own, a renamed repository: followed)
        status, headers, _ = obj.ask(where)
        location = headers.get("location")
        if not 300 <= status < 400 or not location:
            return where   # (answered in place)
        if "://" in location:
            return location
        where = urljoin(where, location)
    raise RemoteError(obj.url, "its server redirected it in a loop")


def get(obj, kept: SimpleNamespace, options: dict, timeout: float):
    """obstore's GET of ``kept`` with ``options``; a refused target asked for again, once."""
    import obstore

    options.pop("version", None)   # (a target is one version's URL)
    try:
        return obstore.get(_store(obj, kept, timeout), "", options=options)
    except Exception as exc:   # noqa: BLE001 - a refused target is asked for again, once; the rest classified
        failure = classify(exc)
        if (failure.kind not in REFUSED and failure.status != 410) or kept.url == obj.resolve_url:
            raise
        log.debug("%s: its target was refused (%s): asked again", obj.url, failure.problem)
        kept = target(obj, kept) or _target(obj.url)
        return obstore.get(_store(obj, kept, timeout), "", options=options)


def _store(obj, kept: SimpleNamespace, timeout: float):
    if timeout not in kept.stores:
        client = {"user_agent": user_agent(), **_client(kept.url, obj._client, timeout, trusted_bundle(obj._own)),
                  "default_headers": obj.target_headers(kept.url)}
        kept.stores[timeout] = _build("http", kept.url, {}, client, timeout)
    return kept.stores[timeout]


__all__ = ["HANDED", "ask", "get", "handed", "target", "user_agent"]
