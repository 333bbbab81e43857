"""An object store's listing: the keys under a prefix, from obstore's ``list`` (the store's own paged listing,
never a request per object). Failures are retried as reads are (:mod:`.retry`): a listing cut mid-way goes on
after the last key it had, within ``retry_seconds`` and the server's outage clock (:mod:`.server`). The pages
come on a request thread while this one waits in slices, so a stop signal ends a listing of a frozen server.
"""

from __future__ import annotations

import time

from ..errors import ServerUnreachable
from .inflight import count, gather, submit
from .retry import Deadline, RemoteError, classify, first_line
from .server import Server

#: Keys a page of the listing hands to Python at once (the store's own pages are its own size).
CHUNK = 1000


def list_keys(server: Server, url: str, prefix: str, where: str | None = None) -> list[str]:
    """The keys under ``prefix`` ("": all) of ``url``'s bucket; refused in one line naming ``where``."""
    if url.startswith("hf://"):
        from .hub import list_tree

        return list_tree(url, prefix, server.options)
    where = where or url
    keys: list[str] = []
    deadline = Deadline(server.retry_seconds, server.timeout, server.outage)
    tries, had = 0, 0
    while True:
        server.check()
        if len(keys) > had:   # progress: the wait is bounded from here
            deadline, had = Deadline(server.retry_seconds, server.timeout, server.outage), len(keys)
        store = server.store(url, deadline.try_timeout())
        t0 = time.perf_counter()
        try:
            gather(submit(1, [(_pages, (store, prefix, keys, server, deadline.sent))]), server.check)
        except (ServerUnreachable, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:   # noqa: BLE001 - the client's errors, classified
            failure = classify(exc)
            count(requests=1, wait_s=time.perf_counter() - t0, retries=int(tries > 0))
            tries += 1
            if failure.kind == "other":
                raise RemoteError(where, f"cannot list {prefix or 'it'}: {first_line(exc)}") from None
            if not failure.retry:
                raise RemoteError(where, f"cannot list {prefix or 'it'}: {failure.problem}") from None
            deadline.failed(failure)
            if not deadline.wait():
                if deadline.servers():
                    raise server.unreachable(failure, tries) from None
                raise RemoteError(where, f"cannot list {prefix or 'it'}: did not answer in {server.retry_seconds:g} s "
                                       f"({failure.problem})") from None
            continue
        # (counted as one request: it tells this process it has started a client runtime a fork must not inherit)
        count(requests=1, wait_s=time.perf_counter() - t0, retries=int(tries > 0))
        return keys


def _pages(store, prefix: str, keys: list[str], server: Server, sent: float) -> None:
    """Append the keys under ``prefix`` after the last of ``keys`` (a retry goes on from there), page by page
    (the try sent at ``sent``)."""
    import obstore

    # (a store's prefix is whole folders)
    for batch in obstore.list(store, prefix=prefix.rstrip("/") or None, offset=keys[-1] if keys else None,
                              chunk_size=CHUNK):
        if batch:
            keys.extend(o["path"] for o in batch)
            server.outage.answered(sent)


__all__ = ["list_keys"]
