"""A location's bytes: the one function that opens a :class:`~.bytestore.ByteStore` for a path or a URL.

A local path is a :class:`~.bytestore.LocalFile`; a URL is the object behind it
(:class:`~.objects.RemoteObject`, imported here only for a URL: obstore's clients, the retries and the
request threads are none of a local read's cost).
"""

from __future__ import annotations

import os

from ..util import is_url
from .bytestore import ByteStore, LocalFile


def open_bytes(path: str | os.PathLike, options: dict | None = None, identity: list | None = None,
               round_trip: float | None = None) -> ByteStore:
    """The bytes of ``path`` (a local file or a URL's object), read with ``options`` (None: the current ones);
    ``identity`` and ``round_trip`` as another process found them (then nothing is asked now)."""
    if is_url(path):
        from .objects import Identity, RemoteObject

        cls = RemoteObject
        if str(path).startswith("hf://"):
            from .hub import HubObject as cls
        return cls.open(str(path), options, Identity.of(identity), round_trip)
    return LocalFile(os.fspath(path))


__all__ = ["open_bytes"]
