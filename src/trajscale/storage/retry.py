"""Which failures of a request are worth another try, what each means for the user, and how long to try.

A failure is told by the client's own error kinds, never by words of its message: obstore's exception classes
and, for everything else, a ``GenericError`` whose text ends with ``object_store``'s error chain: the HTTP
status, the transport's kind (``HttpError { kind: Timeout | ... }``), ``"dns error"``, rustls'
``InvalidCertificate(...)``; :func:`classify` reads those fields and an S3 error body's ``<Code>``.

Retried: a cut response body, a reset or refused connection, a timeout, 5xx, 408 and throttling (429, 503
``SlowDown``), and answers trajscale finds wrong (:class:`WrongAnswer`). Not retried: TLS, DNS, other 4xx and a
store's refusal of an option: each said in one line naming its cause.

:class:`Deadline` bounds a request and its retries to ``retry_seconds`` from its first try; :class:`Outage`
bounds all of a server's requests together (a server that stops answering is given up on once).
"""

from __future__ import annotations

import math
import random
import re
import threading
import time
from dataclasses import dataclass

from ..errors import InputFileError
from .inflight import WAIT_SLICE, raise_if_stopped


class RemoteError(InputFileError):
    """An object that cannot be read: missing, denied, replaced, or its server unreachable."""


class Replaced(RemoteError):
    """The object changed (another ETag or size) since the run first read it."""


class WrongAnswer(Exception):
    """An answer trajscale finds wrong (a body shorter or longer than the range asked): asked again."""


#: What each kind of failure is called in a message, and whether it is retried.
RETRIED = frozenset({"cut", "reset", "refused", "timeout", "server", "throttled", "wrong", "request"})

#: Failures of a server that does not answer at all (not of a file): a request failing only so is the server's.
UNANSWERED = frozenset({"refused", "reset", "timeout"})

REPLACED = "the object was replaced during the run (its ETag changed); run again on the new object"
#: A read of the run's object that answers "no such object": its pinned version is gone (GCS answers a replaced
#: object's former generation 404, as S3 a deleted version), or the key was removed.
GONE = ("the object was replaced or removed during the run (the version it began with is gone); run again on "
        "the new object")
NO_KEY = "no such object (the key does not exist)"
DENIED = "access denied (the credentials may not read this object)"
BAD_KEYS = "access denied: the credentials are not valid for this endpoint (check the access key and secret)"
NO_CREDENTIALS = ("no credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or "
                  "--storage-option anon=true for a public bucket")
TRUST_HINT = ("set SSL_CERT_FILE, REQUESTS_CA_BUNDLE or --storage-option ca_bundle=FILE to the CA that signed it "
              "(docs/remote.md, Certificates)")


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed request, classified: ``kind`` (``cut``, ``reset``, ``refused``, ``timeout``, ``server``,
    ``throttled``, ``wrong``, ``request``: retried; ``tls``, ``dns``, ``missing``, ``no_bucket``, ``denied``,
    ``unauthenticated``, ``replaced``, ``range``, ``no_range``, ``status``, ``option``, ``other``: not), the HTTP status
    if the server answered, and what it means in a message."""

    kind: str
    problem: str
    status: int | None = None

    @property
    def retry(self) -> bool:
        return self.kind in RETRIED


_STATUS = re.compile(r"(?:\bstatus:\s*|status code:\s*)(\d{3})\b")
_HTTP_KIND = re.compile(r"HttpError\s*\{\s*kind:\s*(\w+)")
_OS_KIND = re.compile(r"\bkind:\s*(ConnectionRefused|ConnectionReset|ConnectionAborted|BrokenPipe|TimedOut|"
                      r"UnexpectedEof|NotConnected)\b")
_CERT = re.compile(r"InvalidCertificate\(\s*(\w+)")
_TLS = re.compile(r"\b(InvalidCertificate|InvalidMessage|AlertReceived|PeerIncompatible|PeerMisbehaved|"
                  r"NoCertificatesPresented|HandshakeFailure|InvalidContentType|CorruptMessage)\b")
_CODE = re.compile(r"<Code>([^<]{1,80})</Code>")


def _source(exc: BaseException) -> str:
    """The failure's text with its causes' (obstore puts the error chain in the text)."""
    seen, parts = set(), []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def _status_problem(status: int, code: str | None) -> Failure:
    """A failure told by the server's answer: its status and an S3 error body's code."""
    if code == "SlowDown" or status in (429, 503):
        return Failure("throttled", f"the server is busy ({status} {code or 'throttled'})", status)
    if code in ("InternalError", "RequestTimeout") or status >= 500 or status == 408:
        return Failure("server", f"the server failed ({status}{' ' + code if code else ''})", status)
    if code == "NoSuchBucket":
        return Failure("no_bucket", "no such bucket", status)
    if status == 404 or code == "NoSuchKey":
        return Failure("missing", NO_KEY, status)
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return Failure("unauthenticated", BAD_KEYS, status)
    if status == 401:
        return Failure("unauthenticated", "not authenticated (401): the server wants credentials", status)
    if status == 403 or code == "AccessDenied":
        return Failure("denied", DENIED, status)
    if status == 412:
        return Failure("replaced", REPLACED, status)
    if status == 416 or code == "InvalidRange":
        return Failure("range", "the server has fewer bytes than asked for (416)", status)
    return Failure("status", f"the server answered {status}{' ' + code if code else ''}", status)


def _tls_problem(text: str) -> Failure:
    cert = _CERT.search(text)
    why = cert.group(1) if cert else None
    if "CaUsedAsEndEntity" in text:
        return Failure("tls", "certificate not usable: the server's certificate is a CA's (CA:TRUE) used as the "
                              "server's own, which rustls refuses even when trusted; make it with "
                              "-addext basicConstraints=critical,CA:FALSE or sign it with a small CA "
                              "(docs/remote.md, Certificates)")
    if why == "UnknownIssuer" or "UnknownIssuer" in text:
        return Failure("tls", f"certificate not trusted: its issuer is not a trusted CA; {TRUST_HINT}")
    if why in ("NotValidForName", "NotValidForNameContext") or "NotValidForName" in text:
        return Failure("tls", "certificate not valid for this host name: give the name (or IP address) its "
                              "certificate was made for, or a certificate with this one in subjectAltName")
    if why in ("Expired", "ExpiredContext", "NotValidYet", "NotValidYetContext"):
        return Failure("tls", f"certificate not valid now ({why.replace('Context', '')}): renew it")
    if why:
        return Failure("tls", f"certificate refused ({why}); {TRUST_HINT}")
    return Failure("tls", "the TLS handshake failed (does the server speak https on this port?)")


def classify(exc: BaseException) -> Failure:
    """What a failed request means, from the client's error kinds (see the module's docstring)."""
    if isinstance(exc, WrongAnswer):
        return Failure("wrong", str(exc))
    name = type(exc).__name__
    text = _source(exc)
    if name == "UnknownConfigurationKeyError":
        return Failure("option", f"a storage option the store does not take ({first_line(exc)})")
    if name == "PreconditionError":
        return Failure("replaced", REPLACED, 412)
    if name == "NotSupportedError" and "Range" in str(exc):
        return Failure("no_range", "the server does not answer range requests (it sent the whole object): "
                                   "serve it from one that does (nginx, Apache, any S3-compatible store)")
    code_match = _CODE.search(text)
    code = code_match.group(1).strip() if code_match else None
    status = _STATUS.search(text)
    if isinstance(exc, FileNotFoundError) or name == "NotFoundError":
        if code == "NoSuchBucket":
            return Failure("no_bucket", "no such bucket", 404)
        return Failure("missing", NO_KEY, 404)
    if name == "UnauthenticatedError":
        return _status_problem(int(status.group(1)), code) if status else Failure("unauthenticated", BAD_KEYS)
    if name == "PermissionDeniedError":
        return _status_problem(int(status.group(1)) if status else 403, code)
    if status:
        return _status_problem(int(status.group(1)), code)
    if _TLS.search(text):
        return _tls_problem(text)
    kind = _HTTP_KIND.search(text)
    os_kind = _OS_KIND.search(text)
    if '"dns error"' in text:
        return Failure("dns", "host name not found (DNS): check the URL or the endpoint")
    if kind is not None:
        k = kind.group(1)
        if k == "Timeout":
            return Failure("timeout", "no answer within the request's timeout")
        if k == "Interrupted":
            if os_kind and os_kind.group(1) == "ConnectionReset":
                return Failure("reset", "the connection was reset")
            return Failure("cut", "the connection was cut mid-response")
        if k == "Connect":
            if os_kind and os_kind.group(1) == "ConnectionRefused":
                return Failure("refused", "connection refused")
            return Failure("refused", "could not connect")
        if k in ("Request", "Decode"):
            return Failure("request", f"the request failed ({k.lower()})")
    if os_kind is not None:
        return Failure("reset" if os_kind.group(1) != "TimedOut" else "timeout", os_kind.group(1))
    if isinstance(exc, TimeoutError):
        return Failure("timeout", "no answer within the request's timeout")
    if isinstance(exc, ConnectionError):
        return Failure("reset", f"the connection failed ({name})")
    if "credential" in text.lower() and "missing" in text.lower():
        return Failure("unauthenticated", NO_CREDENTIALS)
    return Failure("other", f"{name}: {first_line(exc)}")


def first_line(exc: BaseException) -> str:
    """A failure's first line, at most 200 characters (an S3 XML body as its code and message)."""
    text = str(exc).strip()
    if "<?xml" in text or "<Error>" in text:
        code = _CODE.search(text)
        message = re.search(r"<Message>([^<]{1,160})</Message>", text)
        head = text.split("<", 1)[0].strip().rstrip(":").strip()
        head = head.rsplit("status code:", 1)[-1].strip()   # (obstore's "... status code: 500 Internal ...")
        said = ": ".join(m.group(1) for m in (code, message) if m)
        if said:   # the server's words whole, after as much of the client's as fits
            return f"{head.splitlines()[0][:120]}: {said}" if head else said
    return text.splitlines()[0][:200] if text else "no details"


class Outage:
    """Since when a server has not answered: every request to it gives up once that lasts ``retry_seconds``
    (once, not per queued request or per object: :class:`~.server.Server` holds one). The verdict stands
    another ``retry_seconds``, the stopping run's requests failing at once; a later request asks the server again.

    The outage begins at the first try of the earliest failing request, or at the last answered try's sending if
    later: a request whose every try failed, none answered since it began, so ends on this clock, never before
    it, whichever of the requests failed first. An answer ends the outage only if its try was sent after the
    outage began (a late answer to a try sent before says nothing of the server now)."""

    def __init__(self, retry_seconds: float) -> None:
        self.retry_seconds = retry_seconds
        self.end: float | None = None
        #: when the latest answered try was sent (monotonic)
        self.answered_at = -math.inf
        #: the failed tries of the outage, and the last one's failure (what a give-up says)
        self.tries = 0
        self.last: Failure | None = None
        self._lock = threading.Lock()

    def failed(self, since: float, failure: Failure) -> None:
        """A try failed (worth another), of a request whose first try began at ``since`` (monotonic)."""
        with self._lock:
            end = max(since, self.answered_at) + self.retry_seconds
            if self.end is None:
                self.end, self.tries = end, 0
            self.end = min(self.end, end)
            self.tries += 1
            self.last = failure

    def answered(self, sent: float) -> None:
        """A try sent at ``sent`` (monotonic) was answered."""
        with self._lock:
            self.answered_at = max(self.answered_at, sent)
            if self.end is not None and self.end - self.retry_seconds <= sent:
                self.end = None

    def over(self) -> bool:
        end = self.end
        if end is None or time.monotonic() < end:
            return False
        if time.monotonic() < end + self.retry_seconds:
            return True
        with self._lock:   # (lapsed: the next request finds out afresh)
            if self.end == end:
                self.end = None
        return False



class Deadline:
    """How long one request may still be tried: ``retry_seconds`` from its first try, within its object's
    :class:`Outage` (a request whose every try found the server not answering, refused, reset or timed out, waits
    on that clock, the server's verdict, even past its own end); each try's timeout the smaller of ``timeout`` and
    the time left (rounded up to 0.5 s, so the stores made per timeout stay few); backoff exponential with jitter,
    at most 5 s, slept in slices that look for a stop signal. ``retry_seconds=0``: one try, of ``timeout``."""

    def __init__(self, retry_seconds: float, timeout: float, outage: Outage | None = None) -> None:
        self.retry_seconds, self.timeout = retry_seconds, timeout
        self.outage = outage
        self.start: float | None = None
        self.end: float | None = None
        #: when the latest try was sent (monotonic)
        self.sent = 0.0
        self.tries = 0
        #: whether every try failed as a server not answering would (no answer, good or bad, came)
        self.unanswered = True
        #: when its first failure was seen (monotonic): a server that answered nothing sent since is not answering
        self.failed_at: float | None = None
        self._delay = 0.1

    def _end(self) -> float:
        end = self.end
        shared = self.outage.end if self.outage is not None else None
        return end if shared is None else shared if self.unanswered else min(end, shared)

    def failed(self, failure: Failure) -> None:
        """A try failed (worth another): said to the server's clock."""
        self.unanswered = self.unanswered and failure.kind in UNANSWERED
        if self.failed_at is None:
            self.failed_at = time.monotonic()
        if self.outage is not None:
            self.outage.failed(self.start, failure)

    def servers(self) -> bool:
        """Whether the server's clock, not this request's own, ended its tries (the verdict is the server's)."""
        if self.outage is None or self.end is None:
            return False
        if self.failed_at is not None and self.outage.answered_at < self.failed_at:
            return True   # no try of the server's sent since this one first failed was answered, of any object
        shared = self.outage.end
        return shared is not None and (self.unanswered or shared <= self.end)

    def try_timeout(self) -> float:
        """The timeout of the next try (the first try starts the clock)."""
        now = time.monotonic()
        if self.end is None:
            self.start, self.end = now, now + self.retry_seconds
        self.sent = now
        self.tries += 1
        if self.retry_seconds <= 0:   # no retries: the one try has its whole timeout
            return self.timeout
        left = max(self._end() - now, 0.5)
        return min(self.timeout, math.ceil(left * 2) / 2)

    def left(self) -> float:
        return 0.0 if self.end is None else self._end() - time.monotonic()

    def wait(self, retry_after: str | None = None) -> bool:
        """Sleep before the next try (at least a server's ``Retry-After`` seconds; an HTTP date: one); False when
        no time is left for one (a recorded stop signal: SystemExit)."""
        at_least = 0.0 if retry_after is None else float(retry_after) if retry_after.isdigit() else 1.0
        left = self.left()
        if left <= max(0.05, at_least):
            return False
        until = time.monotonic() + min(left, max(at_least, self._delay * (0.5 + random.random())))
        while (nap := until - time.monotonic()) > 0:
            raise_if_stopped()
            time.sleep(min(nap, WAIT_SLICE))
        raise_if_stopped()
        self._delay = min(self._delay * 2, 5.0)
        return self.left() > 0.05

