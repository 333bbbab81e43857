"""The servers a process reads from: one :class:`Server` per scheme, endpoint, bucket and storage options,
shared by every object and listing of it (as fsspec keeps one filesystem per protocol and options).

A server holds its store and one outage clock (:class:`~.retry.Outage`): a process waits for a frozen server
once, not once per object, then raises :class:`~trajscale.errors.ServerUnreachable`, which stops the run (no
file is at fault, so none is refused).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from ..errors import ServerUnreachable
from . import endpoint_of
from .clients import _freeze, check_options, object_store, split_url
from .retry import Failure, Outage

#: Defaults of trajscale's own options.
RETRY_SECONDS = 30.0
TIMEOUT = 20.0


class Server:
    """One server with its storage options: its store per try timeout, and its one :attr:`outage` clock."""

    #: whether its URLs redirect (:mod:`.redirects`; None: not seen yet)
    redirects: bool | None = None

    def __init__(self, url: str, options: Mapping) -> None:
        self.options = dict(options)
        self.own, self.client, self.fs = check_options(url, self.options)
        self.retry_seconds = float(self.own.get("retry_seconds", RETRY_SECONDS))
        self.timeout = float(self.own.get("timeout", TIMEOUT))
        self.name = name_of(url)
        self.endpoint = endpoint_of(url, self.options)
        self.outage = Outage(self.retry_seconds)

    def __repr__(self) -> str:
        return f"Server({self.name!r})"

    def store(self, url: str, timeout: float | None = None):
        """The obstore store of ``url`` on this server, its tries cut at ``timeout`` (default: the option's)."""
        return object_store(url, self.own, self.client, self.fs, self.timeout if timeout is None else timeout)

    def check(self) -> None:
        """Raise :class:`ServerUnreachable` once the server has not answered for ``retry_seconds``."""
        if self.outage.over():
            raise self.unreachable()

    def unreachable(self, failure: Failure | None = None, tries: int = 0) -> ServerUnreachable:
        """The outage said in one line: the server, how long it did not answer, and its last failure."""
        last = failure or self.outage.last
        tries = max(tries, self.outage.tries)
        at = f"endpoint {self.endpoint}, " if self.endpoint not in self.name else ""
        answered = last is not None and last.kind in ("wrong", "server", "throttled")   # (an answer, not a good one)
        how = "gave no usable answer" if answered else "did not answer"
        said = f"; last: {last.problem}" if last is not None else ""
        return ServerUnreachable(self.name, f"{how} in {self.retry_seconds:g} s ({at}{tries} tries{said})")


def name_of(url: str) -> str:
    """The server's part of ``url`` for a message: ``s3://bucket``, ``https://host:port`` (no user or password),
    ``hf://datasets/ORG/NAME``."""
    scheme, _, rest = url.partition("://")
    name, root, _ = split_url(url)
    if name == "http":
        return f"{scheme}://{rest.split('/', 1)[0].rpartition('@')[2]}"
    return f"{scheme}://{root.partition('@')[0] if name == 'hf' else root}"   # (a repository at any revision)


_SERVERS: dict[tuple, Server] = {}
_LOCK = threading.Lock()


def server_of(url: str, options: Mapping) -> Server:
    """This process's :class:`Server` of ``url`` with ``options``: made at the first ask, then the same one."""
    key = (name_of(url), endpoint_of(url, options), os.getpid(), _freeze(dict(options)))
    with _LOCK:
        server = _SERVERS.get(key)
        if server is None:
            server = _SERVERS[key] = Server(url, options)
        return server


def forget_servers() -> None:
    """Let go of this process's servers (a run's end): the next run's requests start with a clock of their own."""
    with _LOCK:
        _SERVERS.clear()


__all__ = ["RETRY_SECONDS", "TIMEOUT", "Server", "forget_servers", "name_of", "server_of"]
