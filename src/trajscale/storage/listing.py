"""An object store's listing: the keys under a prefix, from obstore's ``list`` (the store's own paged listing,
never a request per object). Failures are retried as reads are (:mod:`.retry`): a listing cut mid-way goes on
after the last key it had, within ``retry_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from . import current_options
from .clients import check_options
from .clients import object_store as _store_of
from .inflight import count
from .retry import Deadline, classify, first_line

#: Keys a page of the listing hands to Python at once (the store's own pages are its own size).
CHUNK = 1000


def list_keys(url: str, prefix: str, options: Mapping | None = None) -> list[str]:
    """The keys under ``prefix`` ("": all) of the bucket ``url`` names, listed with ``options``; refused in one line."""
    if url.startswith("hf://"):
        from .hub import list_tree

        return list_tree(url, prefix, dict(current_options() if options is None else options))
    import obstore

    from .objects import RETRY_SECONDS, TIMEOUT
    from .retry import RemoteError

    own, client, fs = check_options(url, dict(current_options() if options is None else options))
    retry_seconds, timeout = float(own.get("retry_seconds", RETRY_SECONDS)), float(own.get("timeout", TIMEOUT))
    keys: list[str] = []
    deadline = Deadline(retry_seconds, timeout)
    tries = 0
    while True:
        store = _store_of(url, own, client, fs, deadline.try_timeout())
        t0 = time.perf_counter()
        try:
            # (a store's prefix is whole folders; after the last key had, where a retry goes on)
            for batch in obstore.list(store, prefix=prefix.rstrip("/") or None, offset=keys[-1] if keys else None,
                                      chunk_size=CHUNK):
                if batch:
                    keys.extend(o["path"] for o in batch)
                    deadline = Deadline(retry_seconds, timeout)   # progress: the wait is bounded from here
                    deadline.try_timeout()
        except Exception as exc:   # noqa: BLE001 - the client's errors, classified
            failure = classify(exc)
            count(requests=1, wait_s=time.perf_counter() - t0, retries=int(tries > 0))
            tries += 1
            if failure.kind == "other":
                raise RemoteError(url, f"cannot list {prefix or 'it'}: {first_line(exc)}") from None
            if not failure.retry or not deadline.wait():
                said = failure.problem if not failure.retry else f"did not answer in {retry_seconds:g} s " \
                                                                 f"({failure.problem})"
                raise RemoteError(url, f"cannot list {prefix or 'it'}: {said}") from None
            continue
        # (counted as one request: it tells this process it has started a client runtime a fork must not inherit)
        count(requests=1, wait_s=time.perf_counter() - t0, retries=int(tries > 0))
        return keys


__all__ = ["list_keys"]
