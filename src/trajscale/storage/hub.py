"""Files on the Hugging Face Hub, ``hf://``, spelled as ``huggingface_hub`` spells them:
``hf://datasets/ORG/NAME[@REVISION]/PATH`` (``spaces/`` likewise; ``hf://ORG/NAME/...`` is a model's).

A branch or tag is resolved to its commit once a process and every glob match is named with it, so workers,
report and a resumed run read the same bytes whatever the branch does meanwhile. A file's resolve URL redirects
to signed storage, asked once and kept (:mod:`.redirects`). The Hub is asked without following redirects, so the
token goes to the Hub only, never to the storage nor into a message.
With ``cache_dir`` (node-local copies) a record beside them keeps each revision's commit, listing and file identity
last seen; with ``HF_HUB_OFFLINE=1`` they are read from there, and what it lacks is refused in one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urljoin

from ..errors import ConfigError, TrajscaleError
from ..util import atomic_output
from . import process_options
from .bytestore import LocalFile
from .objects import HEAD_BYTES, Identity, RemoteObject
from .redirects import ask
from .retry import RemoteError

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
        parts = url[len("hf://"):].split("/")
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


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def call(url: str, where: str, options: dict, method: str = "GET", what: str = "it") -> tuple[int, dict, bytes]:
    """Ask the Hub (``where``: one of its URLs) for ``url``'s sake, with the token: (status, lower-cased headers,
    body) of a 2xx or 3xx answer (:func:`.redirects.ask`); a refusal said in one line."""
    secret = token(options)
    status, headers, body = ask(url, where, options, method, {"Authorization": f"Bearer {secret}"} if secret else {})
    if status >= 400:
        raise RemoteError(url, _refusal(status, headers, url, what, bool(secret)))
    return status, headers, body


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
    with _PINS_LOCK:   # (asked under the lock: once, whichever thread asks first)
        if key not in _PINS and offline():
            _PINS[key] = recorded(hp, options, "revisions", rev, f"revision {rev}")
            log.warning("%s: HF_HUB_OFFLINE is set: read at %s, the commit %s was at when last resolved (the "
                        "cache %s)", key[1], _PINS[key][:12], rev, options["cache_dir"])
        elif key not in _PINS:
            _PINS[key] = _ask_commit(hp, rev, options)
            record(hp, options, "revisions", rev, _PINS[key])
        return _PINS[key]


def _ask_commit(hp: HubPath, rev: str, options: dict) -> str:
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
            now = sha if offline() else _ask_commit(hp, hp.revision or "main", options)
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
    options = dict(options or {})
    hp = HubPath.of(url)
    rev = hp.revision or "main"
    folder = prefix.strip("/")
    if offline():
        return recorded(hp, options, "trees", f"{rev}/{folder}", f"the listing of {folder or 'the repository'}/")
    where = (f"{endpoint(options)}/api/{hp.kind}/{hp.repo}/tree/{quote(rev, safe='')}"
             f"{'/' + quote(folder) if folder else ''}?recursive=true")
    keys: list[str] = []
    while where:
        try:
            _, headers, body = call(url, where, options, what=f"{folder}/ at {rev}")
        except RemoteError as exc:
            if folder and "no such file or folder" in exc.problem:
                break   # (nothing there: a glob that matches nothing)
            raise
        try:
            keys += [e["path"] for e in json.loads(body) if e.get("type") == "file"]
        except (ValueError, TypeError, KeyError, AttributeError):
            raise RemoteError(url, f"the Hub's listing of {folder or 'the repository'} is not a list of files") \
                from None
        link = headers.get("link", "")
        nxt = re.search(r'<([^>]+)>\s*;\s*rel="next"', link)
        where = urljoin(where, nxt.group(1)) if nxt else None
    record(hp, options, "trees", f"{rev}/{folder}", keys)
    return keys


_RECORD_LOCK = threading.Lock()   # (one writer of a name at a time in a process: its temporary name is the pid's)
_CHECKS = {"revisions": lambda v: isinstance(v, str) and bool(_COMMIT.match(v)),
           "trees": lambda v: isinstance(v, list) and all(isinstance(k, str) for k in v),
           "files": lambda v: isinstance(v, list) and len(v) == 2 and isinstance(v[0], str | None)
                              and type(v[1]) is int and v[1] >= 0}


def _entry(hp: HubPath, options: dict, part: str, key: str) -> Path | None:
    """Where the repository's record beside the node-local copies (``cache_dir``) keeps ``part``/``key``: a file
    of its own, so that keeping one costs the same however many are kept; None without a cache."""
    if not options.get("cache_dir"):
        return None
    repo = hashlib.sha256(f"{endpoint(options)} {hp.repo_url}".encode()).hexdigest()[:16]
    name = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return Path(options["cache_dir"]) / f".hf-{hp.repo.replace('/', '--')}-{repo}" / f"{part}-{name}.json"


def _kept(path: Path, part: str, key: str):
    """What the record file ``path`` keeps for ``part``/``key`` (None: nothing), every field checked (it steers
    what is read)."""
    try:
        got = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RemoteError(str(path), f"the Hub's record cannot be read ({exc}): delete it") from None
    if not (isinstance(got, dict) and got.keys() == {"key", "value"} and got["key"] == key
            and _CHECKS[part](got["value"])):
        raise RemoteError(str(path), f"is not a record of a Hub repository's {part} ({key}): delete it")
    return got["value"]


def record(hp: HubPath, options: dict, part: str, key: str, value) -> None:
    """Keep ``value`` under ``part``/``key`` of the repository's record (with ``cache_dir``), written whole
    (:func:`~trajscale.util.atomic_output`); processes recording at once write files of their own."""
    path = _entry(hp, options, part, key)
    if path is None:
        return
    with contextlib.suppress(RemoteError):   # (a damaged one is written anew)
        if _kept(path, part, key) == value:   # (as kept: a later run rewrites nothing)
            return
    try:
        with _RECORD_LOCK:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_output(path) as tmp:
                tmp.write_text(json.dumps({"key": key, "value": value}))
    except (OSError, TrajscaleError) as exc:   # (only an offline read misses it)
        log.warning("%s: the Hub's record is not kept (%s)", options["cache_dir"], getattr(exc, "problem", exc))


def recorded(hp: HubPath, options: dict, part: str, key: str, what: str):
    """What the repository's record keeps under ``part``/``key``, read offline; else refused, ``what`` named."""
    path = _entry(hp, options, part, key)
    if path is None:
        raise RemoteError(hp.repo_url, "HF_HUB_OFFLINE is set: the Hub is not asked, and no cache_dir names a "
                                       "node-local cache to read from (give the one kept online, or unset it)")
    value = _kept(path, part, key)
    if value is None:
        raise RemoteError(f"{hp.repo_url}@{key}" if part != "files" else hp.at(key.split("/", 1)[0]),
                          f"the Hub is offline (HF_HUB_OFFLINE) and {what} is not in the cache "
                          f"{options['cache_dir']}")
    return value


class HubObject(RemoteObject):
    """A file on the Hub, read at one commit by range requests to the storage its resolve URL redirects to."""

    worker_modules = ("obstore", "trajscale.storage.hub")
    asks_first = True   # (a resolve URL redirects, but a small file's)

    def __init__(self, url: str, options: dict | None = None, identity: Identity | None = None) -> None:
        self.hub_path = HubPath.of(url)
        self.commit = identity.version if identity is not None else None
        super().__init__(url, options, identity)
        #: offline: the node-local copy read instead, or why there is none (a read raises it: a run refuses the file)
        self.copy = self._held() if offline() else None

    def _held(self) -> LocalFile | RemoteError:
        from .cache import node_copy

        hp = self.hub_path
        self.commit = self.commit or commit_of(hp, self.options)
        if self._identity is None:
            etag, size = recorded(hp, self.options, "files", f"{self.commit}/{hp.path}", "the file")
            self._identity = Identity(etag, size, self.commit)
        copy = node_copy(Path(self.options["cache_dir"]), self)
        if not copy.is_file() or copy.stat().st_size != self.size:
            return RemoteError(self.url, f"the Hub is offline (HF_HUB_OFFLINE) and the file is not in the cache "
                                         f"{copy.parent}")
        return LocalFile(str(copy))

    def _store(self, timeout: float):
        return None   # (the store is the redirect's target's, asked at the first read)

    def fetch_head(self) -> tuple[Identity, bytes]:
        if self.copy is not None:   # (none held: its reads say so)
            return self._identity, self.copy.first_bytes(HEAD_BYTES) if isinstance(self.copy, LocalFile) else b""
        ident, head = super().fetch_head()
        record(self.hub_path, self.options, "files", f"{self.commit}/{self.hub_path.path}", [ident.etag, ident.size])
        return Identity(ident.etag, ident.size, self.commit), head

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        if isinstance(self.copy, RemoteError):
            raise self.copy
        return super().read_ranges(ranges) if self.copy is None else self.copy.read_ranges(ranges)

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        if self.copy is None:
            super().prefetch(ranges)

    @property
    def resolve_url(self) -> str:
        hp = self.hub_path
        if self.commit is None:
            self.commit = commit_of(hp, self.options)
        kind = "" if hp.kind == "models" else hp.kind + "/"
        return f"{endpoint(self.options)}/{kind}{hp.repo}/resolve/{self.commit}/{quote(hp.path)}"

    @property
    def kept_as(self) -> tuple[str, str]:
        """Its resolve URL, and (a digest of) the token that asks it."""
        return self.resolve_url, hashlib.sha256((token(self.options) or "").encode()).hexdigest()[:16]

    def ask(self, where: str) -> tuple[int, dict, bytes]:
        return call(self.url, where, self.options, "HEAD", self.hub_path.path)

    def target_headers(self, url: str) -> dict:
        """The token, where the Hub serves a small file itself (never to the storage)."""
        secret = token(self.options)
        return {"Authorization": f"Bearer {secret}"} if secret and url.startswith(endpoint(self.options)) else {}


__all__ = ["HubObject", "HubPath", "commit_of", "list_tree", "pin_revisions", "pinned", "pinned_revisions"]
