"""Files on the Hugging Face Hub, ``hf://``, spelled as ``huggingface_hub`` spells them:
``hf://datasets/ORG/NAME[@REVISION]/PATH`` (``spaces/`` likewise; ``hf://ORG/NAME/...`` is a model's).

A branch or tag is resolved to its commit once a process and every glob match is named with it, so workers,
report and a resumed run read the same bytes whatever the branch does meanwhile. A file's signed storage URL is
asked once and kept (:class:`HubObject`), asked again once when refused (expired). The Hub's API is asked with
the standard library without following redirects, so the token goes to the Hub only, never to the storage nor
into a message; its failures are retried as reads are, on its server's outage clock (``Retry-After`` waited out).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote, unquote, urljoin

from ..errors import ConfigError
from . import process_options
from .clients import _build, _client, trusted_bundle
from .objects import Identity, RemoteObject
from .retry import Deadline, Failure, RemoteError, _status_problem, classify, first_line

log = logging.getLogger(__name__)

KINDS = ("datasets", "spaces", "models")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
#: How to give a token, for a repository that wants one.
TOKEN_HINT = "set HF_TOKEN, log in with `hf auth login`, or give --storage-option token=..."


@dataclass(frozen=True)
class HubPath:
    """``hf://[KIND/]ORG/NAME[@REVISION]/PATH`` taken apart (``revision`` None: the default branch, main)."""

    kind: str
    repo: str
    revision: str | None
    path: str

    @classmethod
    def of(cls, url: str) -> HubPath:
        rest = url[len("hf://"):]
        parts = rest.split("/")
        kind = parts.pop(0) if parts[0] in KINDS else "models"
        if len(parts) < 2 or not parts[0] or not parts[1] or parts[1].startswith("@"):
            raise ConfigError(f"{url}: give hf://datasets/ORG/NAME/PATH (or hf://datasets/ORG/NAME@REVISION/PATH)")
        name, _, revision = parts[1].partition("@")
        return cls(kind, f"{parts[0]}/{name}", unquote(revision) or None, "/".join(parts[2:]))

    @property
    def root(self) -> str:
        """The repository as the URL names it, with its revision: ``datasets/ORG/NAME@main``."""
        rev = f"@{quote(self.revision, safe='')}" if self.revision else ""
        return f"{'' if self.kind == 'models' else self.kind + '/'}{self.repo}{rev}"

    @property
    def repo_url(self) -> str:
        return f"hf://{self.kind}/{self.repo}" if self.kind != "models" else f"hf://{self.repo}"

    def at(self, commit: str) -> str:
        """This path's URL at ``commit``."""
        return f"hf://{HubPath(self.kind, self.repo, commit, self.path).root}/{self.path}"


def endpoint(options: dict) -> str:
    return (options.get("endpoint_url") or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def token(options: dict) -> str | None:
    """The token: the storage option, ``HF_TOKEN``, else the file ``huggingface_hub``'s login writes."""
    if options.get("token"):
        return str(options["token"])
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    try:
        with open(os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token"), encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


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


def call(url: str, where: str, options: dict, method: str = "GET", what: str = "it") -> tuple[int, dict, bytes]:
    """Ask the Hub (``where``: one of its URLs) for ``url``'s sake: (status, lower-cased headers, body) of a 2xx
    or 3xx answer; failures retried as reads are, on the clock of ``url``'s server (:mod:`.retry`), a
    ``Retry-After`` waited out."""
    import http.client
    import urllib.error
    import urllib.request

    from .inflight import count
    from .server import server_of

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise RemoteError(url, "HF_HUB_OFFLINE is set: the Hub is not asked (unset it, or read a local copy)")
    server = server_of(url, options)
    deadline = Deadline(server.retry_seconds, server.timeout, server.outage)
    headers = {"User-Agent": user_agent()}
    secret = token(options)
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    while True:
        server.check()
        t0, status, got = time.perf_counter(), None, {}
        try:
            with _opener(options).open(urllib.request.Request(where, method=method, headers=headers),
                                       timeout=deadline.try_timeout()) as r:
                status, got, body = r.status, r.headers, r.read()
        except urllib.error.HTTPError as exc:   # (a redirect not followed comes here too)
            status, got, body = exc.code, exc.headers or {}, b""
        except (OSError, http.client.HTTPException) as exc:   # (refused, reset, cut mid-answer, timed out)
            failure = classify(exc.reason if isinstance(getattr(exc, "reason", None), OSError) else exc)
            if not failure.retry:   # (no answer at all: tried again, whatever kept it)
                failure = Failure("cut", f"no whole answer ({first_line(exc)})")
        got = {k.lower(): v for k, v in dict(got).items()}
        count(1, wait_s=time.perf_counter() - t0, retries=int(deadline.tries > 1))
        if status is not None and status < 400:
            server.outage.answered(deadline.sent)
            return status, got, body
        if status is not None:
            failure = _status_problem(status, got.get("x-error-code"))
            if not failure.retry:
                raise RemoteError(url, _refusal(status, got, url, what, bool(secret)))
        deadline.failed(failure)
        if not deadline.wait(got.get("retry-after") if status in (429, 503) else None):
            if deadline.servers():
                raise server.unreachable(failure, deadline.tries)
            raise RemoteError(url, f"the Hub {endpoint(options)} gave no usable answer in {server.retry_seconds:g} s "
                                   f"({deadline.tries} tries; last: {failure.problem})")
        log.debug("%s: the Hub: %s; again", url, failure.problem)


def _refusal(status: int, headers: dict, url: str, what: str, with_token: bool) -> str:
    code = headers.get("x-error-code", "")
    repo = HubPath.of(url).repo_url
    if status == 401 or (status == 403 and not with_token):
        return f"access denied: {repo} is gated or private, and no token was given: {TOKEN_HINT}"
    if status == 403:
        return f"access denied: the token given may not read {repo} (403 {code}): ask for access on its page"
    if code == "RepoNotFound":
        return f"no such repository on the Hub ({repo})"
    if code == "RevisionNotFound":
        return f"no such revision of {repo} ({HubPath.of(url).revision})"
    if status == 404:
        return f"no such file or folder: {what}"
    return f"the Hub refused it ({status} {code})".rstrip()


_PINS: dict[tuple[str, str], str] = {}   # (endpoint, revision's URL) -> commit
_PINS_LOCK = threading.Lock()


def commit_of(hp: HubPath, options: dict) -> str:
    """The commit ``hp``'s revision is at: asked once a process (a commit id is its own)."""
    rev = hp.revision or "main"
    if _COMMIT.match(rev):
        return rev
    key = (endpoint(options), f"hf://{HubPath(hp.kind, hp.repo, hp.revision, '').root}")
    with _PINS_LOCK:
        if key in _PINS:
            return _PINS[key]
    sha = _ask_commit(hp, rev, options)
    with _PINS_LOCK:
        return _PINS.setdefault(key, sha)


def _ask_commit(hp: HubPath, rev: str, options: dict) -> str:
    import json

    api = f"{endpoint(options)}/api/{hp.kind}/{hp.repo}/revision/{quote(rev, safe='')}"
    _, _, body = call(hp.at(rev), api, options, what=f"revision {rev}")
    try:
        sha = json.loads(body)["sha"]
    except (ValueError, KeyError, TypeError):
        sha = None
    if not isinstance(sha, str) or not _COMMIT.match(sha):
        raise RemoteError(hp.repo_url, f"the Hub's answer for revision {rev} names no commit ({sha!r})")
    return sha


def pin_revisions(pins: dict | None = None, options: dict | None = None) -> None:
    """Read the revisions ``pins`` names at their commits, saying which moved; None: forget those resolved."""
    if pins is None:
        with _PINS_LOCK:
            _PINS.clear()
    options = dict(process_options() if options is None else options)
    for key, sha in (pins or {}).items():
        hp = HubPath.of(f"{key}/")
        try:
            now = _ask_commit(hp, hp.revision or "main", options)
        except RemoteError as exc:
            now = None
            log.debug("%s", exc)
        if now != sha:
            log.warning("%s has moved since the run began (%s, now %s): the resumed run reads %s, as it began",
                        key, sha[:12], now[:12] if now else "not found", sha[:12])
        with _PINS_LOCK:
            _PINS[(endpoint(options), key)] = sha


def pinned_revisions() -> dict[str, str]:
    """The revisions this process resolved: ``{"hf://datasets/ORG/NAME@main": commit}``."""
    with _PINS_LOCK:
        return {key: sha for (_, key), sha in _PINS.items()}


def pinned(url: str, options: dict | None) -> str:
    """``url`` with its revision replaced by the commit it is at."""
    hp = HubPath.of(url)
    return hp.at(commit_of(hp, dict(process_options() if options is None else options)))


def list_tree(url: str, prefix: str, options: dict | None) -> list[str]:
    """The files under ``prefix`` of ``url``'s repository at its revision: the Hub's tree, page after page."""
    import json

    options = dict(options or {})
    hp = HubPath.of(url)
    rev = hp.revision or "main"
    folder = prefix.strip("/")
    where = (f"{endpoint(options)}/api/{hp.kind}/{hp.repo}/tree/{quote(rev, safe='')}"
             f"{'/' + quote(folder) if folder else ''}?recursive=true")
    keys: list[str] = []
    while where:
        try:
            _, headers, body = call(url, where, options, what=f"{folder}/ at {rev}")
        except RemoteError as exc:
            if folder and "no such file or folder" in exc.problem:
                return keys   # (nothing there: a glob that matches nothing)
            raise
        try:
            keys += [e["path"] for e in json.loads(body) if e.get("type") == "file"]
        except (ValueError, TypeError, KeyError, AttributeError):
            raise RemoteError(url, f"the Hub's listing of {folder or 'the repository'} is not a list of files") \
                from None
        link = headers.get("link", "")
        nxt = re.search(r'<([^>]+)>\s*;\s*rel="next"', link)
        where = urljoin(where, nxt.group(1)) if nxt else None
    return keys


class _Target:
    """Where a file's bytes are (the resolve URL's redirect), and the http stores reading it, by timeout."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stores: dict[float, object] = {}


#: The option a worker is handed a file's storage URL in (by :meth:`HubObject.state`; taken out before any use).
HANDED = "resolved_url"
_TARGETS: dict[tuple[str, str], _Target] = {}
_TARGETS_LOCK = threading.Lock()
_RESOLVING: dict[tuple[str, str], threading.Lock] = {}


class HubObject(RemoteObject):
    """A file on the Hub, read at one commit by range requests to the storage its resolve URL redirects to."""

    worker_modules = ("obstore", "trajscale.storage.hub")

    def __init__(self, url: str, options: dict | None = None, identity: Identity | None = None) -> None:
        self.hub_path = HubPath.of(url)
        options = dict(process_options() if options is None else options)
        handed = options.pop(HANDED, None)
        super().__init__(url, options, identity)
        self.commit = identity.version if identity is not None else None
        if isinstance(handed, str) and self.commit is not None:
            with _TARGETS_LOCK:
                _TARGETS.setdefault(self._kept_as, _Target(handed))

    def state(self) -> dict:
        """As a remote object's, with the storage URL its resolve URL redirected to: a worker reads it directly."""
        state = super().state()
        with _TARGETS_LOCK:
            kept = _TARGETS.get(self._kept_as) if self.commit is not None else None
        if kept is not None:
            state["storage_options"] = {**(state["storage_options"] or {}), HANDED: kept.url}
        return state

    def _store(self, timeout: float):
        return None   # (the store is the redirect's target's, asked at the first read)

    def fetch_head(self) -> tuple[Identity, bytes]:
        ident, head = super().fetch_head()
        return Identity(ident.etag, ident.size, self.commit), head

    @property
    def resolve_url(self) -> str:
        hp = self.hub_path
        if self.commit is None:
            self.commit = commit_of(hp, self.options)
        kind = "" if hp.kind == "models" else hp.kind + "/"
        return f"{endpoint(self.options)}/{kind}{hp.repo}/resolve/{self.commit}/{quote(hp.path)}"

    @property
    def _kept_as(self) -> tuple[str, str]:
        """What the file's storage URL is kept under: its resolve URL, and (a digest of) the token that asked."""
        import hashlib

        return self.resolve_url, hashlib.sha256((token(self.options) or "").encode()).hexdigest()[:16]

    def _send(self, options: dict, timeout: float):
        import obstore

        options.pop("version", None)   # (the commit is in the resolve URL)
        target = self._target(None)
        try:
            return obstore.get(self._target_store(target, timeout), "", options=options)
        except Exception as exc:   # noqa: BLE001 - a refused target is asked for again, once; the rest classified
            if classify(exc).kind not in ("denied", "unauthenticated", "missing"):
                raise
            log.debug("%s: its storage URL was refused (%s): resolved again", self.url, classify(exc).problem)
            target = self._target(target)
            return obstore.get(self._target_store(target, timeout), "", options=options)

    def _target(self, refused: _Target | None) -> _Target:
        """The file's storage URL: kept by the process; resolved when none is kept, or ``refused`` is."""
        key = self._kept_as
        with _TARGETS_LOCK:
            kept = _TARGETS.get(key)
            if kept is not None and kept is not refused:
                return kept
            lock = _RESOLVING.setdefault(key, threading.Lock())
        with lock:   # (one resolve at a time a file: requests waiting for it take its answer)
            with _TARGETS_LOCK:
                kept = _TARGETS.get(key)
            if kept is not None and kept is not refused:
                return kept
            target = _Target(self._resolve(self.resolve_url))
            with _TARGETS_LOCK:
                _TARGETS[key] = target
                while len(_TARGETS) > 4096:
                    _TARGETS.pop(next(iter(_TARGETS)))
            return target

    def _resolve(self, where: str) -> str:
        for _ in range(4):   # (a relative redirect is the Hub's own: a renamed repository)
            status, headers, _ = call(self.url, where, self.options, "HEAD", self.hub_path.path)
            location = headers.get("location")
            if status < 300 or not location:
                return where   # (a small file: the Hub serves its bytes itself)
            if "://" in location:
                return location
            where = urljoin(where, location)
        raise RemoteError(self.url, "the Hub redirected its resolve URL in a loop")

    def _target_store(self, target: _Target, timeout: float):
        store = target.stores.get(timeout)
        if store is None:
            trust = trusted_bundle(self._own)
            client = {"user_agent": user_agent(), **_client(target.url, self._client, timeout, trust)}
            if target.url.startswith(endpoint(self.options)) and token(self.options):
                client["default_headers"] = {"Authorization": f"Bearer {token(self.options)}"}
            store = target.stores[timeout] = _build("http", target.url, {}, client, timeout)
        return store


__all__ = ["HubObject", "HubPath", "commit_of", "list_tree", "pin_revisions", "pinned", "pinned_revisions"]
