"""A Hugging Face Hub for the tests: the part of the Hub's protocol its official client (``huggingface_hub``)
speaks to read a repository, on two servers of 127.0.0.1 (the standard library's ``ThreadingHTTPServer``).

The Hub (:attr:`HubServer.endpoint`, what ``HF_ENDPOINT`` names):

* ``GET /api/{datasets,models,spaces}/ORG/NAME[/revision/REV]``: the repository's information, with ``sha``, the
  commit the revision is at;
* ``GET /api/.../ORG/NAME/tree/REV[/PATH][?recursive=true]``: its files and folders, with sizes, git object ids
  and LFS ids, :attr:`HubServer.page` to an answer, the next page named by a ``Link: <...>; rel="next"`` header;
* ``POST /api/.../ORG/NAME/paths-info/REV``: the entries of the paths named;
* ``HEAD``/``GET /[datasets/|spaces/]ORG/NAME/resolve/REV/PATH``: a file at a revision. An LFS file (``*.h5``,
  ``*.xtc``, anything of :data:`LFS_MIN` bytes or more) is answered ``302`` to the storage server, with
  ``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag`` (its sha256), ``X-Linked-Size`` and ``Location``; a small file
  is answered in place (ranges too). No Xet header is ever sent: the client then reads through the redirect.

The storage server answers ``GET``/``HEAD /SHA256?expires=T&sig=S`` (ranges, ``If-Match``), signed by the Hub
with an expiry :attr:`HubServer.ttl` seconds on; a URL expired or not signed by the Hub is refused (``403``).

A gated repository answers ``401`` without a token and ``403`` with one it does not know (``X-Error-Code:
GatedRepo``); a missing repository, revision or file ``404`` with the Hub's ``X-Error-Code``. ``throttle_every=N``
answers every Nth request of either server ``429`` with ``Retry-After``, ``freeze_after=N`` none after the Nth
(a frozen server); ``delay`` seconds are slept before every answer. :attr:`HubServer.resolves` counts resolve
requests by file, :attr:`HubServer.ranges` the storage server's reads (:attr:`HubServer.range_log` each range, by
path), :attr:`HubServer.requests` every request, :attr:`HubServer.agents` them by ``User-Agent``.
"""

from __future__ import annotations

import collections
import email.utils
import hashlib
import hmac
import json
import math
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

#: Files of at least this many bytes are LFS files (besides ``*.h5``, ``*.xtc``): a redirect to the storage.
LFS_MIN = 10_000
LFS_SUFFIXES = (".h5", ".hdf5", ".xtc", ".parquet", ".bin")
#: The token the server knows (a test's; any other is refused by a gated repository).
TOKEN = "hf_trajscaleTestTokenDoNotPrint0123"
_MODIFIED = email.utils.formatdate(1_700_000_000, usegmt=True)
_DATE = "2026-01-01T00:00:00.000Z"


@dataclass(frozen=True)
class Blob:
    data: bytes
    sha256: str
    git: str   # the git blob id

    @classmethod
    def of(cls, data: bytes) -> Blob:
        git = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        return cls(data, hashlib.sha256(data).hexdigest(), git)

    def lfs(self, path: str) -> bool:
        return path.endswith(LFS_SUFFIXES) or len(self.data) >= LFS_MIN


@dataclass
class Repo:
    kind: str   # datasets, models, spaces
    name: str   # ORG/NAME
    gated: bool = False
    commits: dict[str, dict[str, Blob]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)

    def commit_of(self, rev: str) -> str | None:
        return self.refs.get(rev) or (rev if rev in self.commits else None)


class HubServer:
    """The Hub and its storage on free ports (see the module's docstring); :meth:`close` stops both."""

    def __init__(self, *, page: int = 50, ttl: float = 300.0, delay: float = 0.0, throttle_every: int = 0,
                 retry_after: int = 1, freeze_after: int | None = None) -> None:
        self.page, self.ttl, self.delay = page, ttl, delay
        #: seconds the Hub's and its storage's clock run ahead of the machine's: a test moves it on to expire the
        #: URLs signed so far, at once (not by sleeping, which a loaded machine's slow reads would race)
        self.ahead = 0.0
        self.freeze_after = freeze_after
        self._closed = threading.Event()
        #: where the signed URLs send a client (None: the storage server; a proxy in front of it, say)
        self.storage_via: str | None = None
        self.throttle_every, self.retry_after = throttle_every, retry_after
        self.repos: dict[tuple[str, str], Repo] = {}
        self.blobs: dict[str, Blob] = {}
        self._secret = hashlib.sha256(str(time.time_ns()).encode()).digest()
        self._lock = threading.Lock()
        self.requests = 0
        self.throttled = 0
        self.ranges = 0
        self.storage_bytes = 0
        self.resolves: collections.Counter = collections.Counter()
        self.agents: collections.Counter = collections.Counter()   # requests by User-Agent
        self.range_log: list[tuple[str, int, int]] = []   # the ranges answered, in order: (path, start, stop)
        self.authorizations: list[str] = []   # the Authorization headers the storage server was sent
        self._hub = _serve(self, _HubHandler)
        self._storage = _serve(self, _StorageHandler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def storage(self) -> str:
        return f"http://127.0.0.1:{self._storage.server_address[1]}"

    def env(self, **more: str) -> dict:
        """The environment a client reaches this Hub with (no token: give ``HF_TOKEN`` where one is wanted)."""
        return {"HF_ENDPOINT": self.endpoint, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1", **more}

    # -- the repositories ---------------------------------------------------------------------------------------
    def commit(self, name: str, files: dict[str, bytes | str | Path], *, kind: str = "datasets",
               branch: str = "main", gated: bool = False, keep: bool = True) -> str:
        """A commit on ``branch`` of repository ``kind/name`` (made if new): the branch's files (``keep``) with
        ``files`` (bytes, or a local file's path) added or replaced; its commit id."""
        repo = self.repos.setdefault((kind, name), Repo(kind, name, gated))
        repo.gated = repo.gated or gated
        tree = dict(repo.commits.get(repo.refs.get(branch, ""), {})) if keep else {}
        for path, data in files.items():
            blob = Blob.of(data if isinstance(data, bytes) else Path(data).read_bytes())
            self.blobs[blob.sha256] = blob
            tree[path.strip("/")] = blob
        sha = hashlib.sha1(json.dumps([repo.refs.get(branch), sorted((p, b.git) for p, b in tree.items())])
                           .encode()).hexdigest()
        repo.commits[sha] = tree
        repo.refs[branch] = sha
        return sha

    def signed(self, sha256: str, expires: float | None = None) -> str:
        expires = math.ceil(time.time() + self.ahead + self.ttl) if expires is None else int(expires)   # (ttl s+)
        return f"{self.storage_via or self.storage}/{sha256}?expires={expires}&sig={self._sign(sha256, expires)}"

    def _sign(self, sha256: str, expires: int) -> str:
        return hmac.new(self._secret, f"{sha256}:{expires}".encode(), hashlib.sha256).hexdigest()[:32]

    def close(self) -> None:
        self._closed.set()
        for server in (self._hub, self._storage):
            server.shutdown()
            server.server_close()

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _arrived(self) -> str | None:
        """One request counted; what it gets instead of its answer: ``"429"`` (every ``throttle_every``-th),
        ``"frozen"`` (every one past the first ``freeze_after``: nothing until the server closes), None."""
        with self._lock:
            self.requests += 1
            if self.freeze_after is not None and self.requests > self.freeze_after:
                return "frozen"
            throttle = bool(self.throttle_every) and self.requests % self.throttle_every == 0
            self.throttled += throttle
        if self.delay:
            time.sleep(self.delay)
        return "429" if throttle else None


def _serve(hub: HubServer, handler) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.hub = hub
    threading.Thread(target=server.serve_forever, daemon=True, name=handler.__name__).start()
    return server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # (keep-alive: a client's pool reuses its connections)

    @property
    def hub(self) -> HubServer:
        return self.server.hub

    def log_message(self, *args) -> None:   # (quiet: a test reads the counters)
        pass

    def answer(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def error(self, status: int, code: str, message: str) -> None:
        self.answer(status, json.dumps({"error": message}).encode(),
                    {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"})

    def throttled(self) -> bool:
        with self.hub._lock:
            self.hub.agents[self.headers.get("User-Agent", "")] += 1
        if self.command == "POST":   # (the body is read before any answer: the connection stays in step)
            self._body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        instead = self.hub._arrived()
        if instead == "frozen":
            self.hub._closed.wait()
            self.close_connection = True
        elif instead:
            self.answer(429, b"Too Many Requests", {"Retry-After": self.hub.retry_after})
        return instead is not None

    def send_range(self, data: bytes, headers: dict) -> None:
        """``data`` whole, or the range a ``Range: bytes=A-B`` header asks (206; 416 past its end)."""
        asked = self.headers.get("Range")
        headers = {**headers, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if not asked:
            with self.hub._lock:
                self.hub.storage_bytes += len(data) * (self.command == "GET")
            self.answer(200, data, headers)
            return
        first, _, last = asked.removeprefix("bytes=").partition("-")
        a = int(first) if first else max(0, len(data) - int(last))
        b = min(int(last) + 1, len(data)) if last and first else len(data)
        if a >= len(data) or b <= a:
            self.answer(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            return
        with self.hub._lock:
            self.hub.storage_bytes += (b - a) * (self.command == "GET")
            self.hub.range_log.append((urlsplit(self.path).path, a, b))
        self.answer(206, data[a:b], {**headers, "Content-Range": f"bytes {a}-{b - 1}/{len(data)}"})


class _HubHandler(_Handler):
    def do_GET(self) -> None:
        self._route()

    do_HEAD = do_POST = do_GET

    def _route(self) -> None:
        if self.throttled():
            return
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        query = parse_qs(url.query)
        if parts[0] == "api" and len(parts) >= 4:
            kind, name, op = parts[1], "/".join(parts[2:4]), parts[4] if len(parts) > 4 else "revision"
            rev = unquote(parts[5]) if len(parts) > 5 else "main"
            rest = unquote("/".join(parts[6:]))
        else:
            kind = parts.pop(0) if parts[0] in ("datasets", "spaces") else "models"
            if len(parts) < 5 or parts[2] != "resolve":
                self.error(404, "EntryNotFound", "no such page")
                return
            name, op, rev, rest = "/".join(parts[:2]), "resolve", unquote(parts[3]), unquote("/".join(parts[4:]))
        repo = self.hub.repos.get((kind, name))
        if repo is None:
            self.error(404, "RepoNotFound", f"Repository Not Found for url: {self.path}.")
            return
        if repo.gated and not self._authorized(repo):
            return
        sha = repo.commit_of(rev)
        if sha is None:
            self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return
        tree = repo.commits[sha]
        if op == "revision":
            self._json({"id": name, "sha": sha, "private": False, "gated": "auto" if repo.gated else False,
                        "disabled": False, "downloads": 0, "likes": 0, "tags": [], "lastModified": _DATE,
                        "createdAt": _DATE, "siblings": [{"rfilename": p} for p in sorted(tree)]})
        elif op == "tree":
            self._tree(repo, rev, sha, tree, rest, query)
        elif op == "paths-info":
            paths = parse_qs(self._body.decode()).get("paths") or json.loads(self._body or b"{}").get("paths", [])
            self._json([e for e in _entries(tree, "", True, sha) if e["path"] in {p.strip("/") for p in paths}])
        elif op == "resolve":
            self._resolve(repo, sha, tree, rest)
        else:
            self.error(404, "EntryNotFound", f"no such page: {op}")

    def _authorized(self, repo: Repo) -> bool:
        given = self.headers.get("Authorization", "")
        if given == f"Bearer {TOKEN}":
            return True
        status = 403 if given else 401
        self.error(status, "GatedRepo", f"Access to dataset {repo.name} is restricted. You must have access to it "
                                        "and be authenticated to access it. Please log in.")
        return False

    def _json(self, value, headers: dict | None = None) -> None:
        self.answer(200, json.dumps(value).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _tree(self, repo: Repo, rev: str, sha: str, tree: dict, folder: str, query: dict) -> None:
        folder = folder.strip("/")
        recursive = (query.get("recursive") or ["false"])[0].lower() in ("true", "1")
        entries = _entries(tree, folder, recursive, sha, (query.get("expand") or ["false"])[0] == "true")
        if folder and not entries and folder not in tree:
            self.error(404, "EntryNotFound", f"{folder} does not exist on {rev}")
            return
        start = int((query.get("cursor") or ["0"])[0])
        page = entries[start:start + self.hub.page]
        headers = {}
        if start + self.hub.page < len(entries):
            kept = {k: v[0] for k, v in query.items() if k != "cursor"}
            more = "&".join(f"{k}={quote(v)}" for k, v in kept.items())
            here = self.path.split("?")[0]
            host = self.headers.get("Host") or self.hub.endpoint.split("//")[1]   # (as the client named it)
            headers["Link"] = f'<http://{host}{here}?{more}&cursor={start + self.hub.page}>; rel="next"'
        self._json(page, headers)

    def _resolve(self, repo: Repo, sha: str, tree: dict, path: str) -> None:
        blob = tree.get(path)
        with self.hub._lock:
            self.hub.resolves[f"{repo.name}/{path}"] += 1
        if blob is None:
            self.error(404, "EntryNotFound", f"{path} does not exist at {sha}")
            return
        headers = {"X-Repo-Commit": sha, "ETag": f'"{blob.git}"'}
        if not blob.lfs(path):
            self.send_range(blob.data, headers)
            return
        headers.update({"X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": len(blob.data),
                        "Location": self.hub.signed(blob.sha256)})
        self.answer(302, b"", headers)


def _entries(tree: dict[str, Blob], folder: str, recursive: bool, sha: str, expand: bool = False) -> list[dict]:
    """The tree API's entries under ``folder`` (its children, or everything below it), sorted by path."""
    below = {p: b for p, b in tree.items() if not folder or p.startswith(folder + "/")}
    out: dict[str, dict] = {}
    for path, blob in below.items():
        rel = path[len(folder) + 1:] if folder else path
        parts = rel.split("/")
        for depth in range(1, len(parts)):   # the folders on the way
            sub = "/".join(([folder] if folder else []) + parts[:depth])
            if recursive or depth == 1:
                out.setdefault(sub, {"type": "directory", "oid": hashlib.sha1(sub.encode()).hexdigest(),
                                     "size": 0, "path": sub})
        if recursive or len(parts) == 1:
            entry = {"type": "file", "oid": blob.git, "size": len(blob.data), "path": path}
            if blob.lfs(path):
                entry["lfs"] = {"oid": blob.sha256, "size": len(blob.data), "pointerSize": 134}
            if expand:
                entry["lastCommit"] = {"id": sha, "title": "data", "date": _DATE}
            out[path] = entry
    return [out[p] for p in sorted(out)]


class _StorageHandler(_Handler):
    def do_GET(self) -> None:
        if self.throttled():
            return
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        sha256 = url.path.strip("/")
        if "Authorization" in self.headers:
            with self.hub._lock:
                self.hub.authorizations.append(self.headers["Authorization"])
        try:
            expires = int(query.get("expires", ""))
        except ValueError:
            expires = 0
        if not hmac.compare_digest(query.get("sig", ""), self.hub._sign(sha256, expires)):
            self.answer(403, b"<Error><Code>AccessDenied</Code><Message>not signed</Message></Error>")
            return
        if time.time() + self.hub.ahead > expires:
            self.answer(403, b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>")
            return
        blob = self.hub.blobs.get(sha256)
        if blob is None:
            self.answer(404, b"<Error><Code>NoSuchKey</Code></Error>")
            return
        etag = f'"{blob.sha256}"'
        if self.headers.get("If-Match") not in (None, "*", etag):
            self.answer(412, b"<Error><Code>PreconditionFailed</Code></Error>")
            return
        with self.hub._lock:
            self.hub.ranges += self.command == "GET"
        self.send_range(blob.data, {"ETag": etag, "Last-Modified": _MODIFIED})

    do_HEAD = do_GET


__all__ = ["LFS_MIN", "TOKEN", "HubServer"]
