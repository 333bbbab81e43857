"""A first user of a node cache, in its own spawned process (kept light: no torch import)."""

from __future__ import annotations

import hashlib


def sha(path) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def first_user(store, cache_dir, barrier, queue):
    from trajscale.storage.nodecache import NodeCache

    barrier.wait()
    entry = NodeCache(cache_dir).open(store)
    queue.put((entry.copied, entry.path, sha(entry.path)))   # read while holding the entry
    entry.close()
