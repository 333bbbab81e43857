"""The entries of trajscale's on-disk caches (under :func:`~trajscale.util.cache_root`): parsed topologies,
selections, and what reading a remote object learned (XTC offsets, HDF5 metadata).

A topology's entry is a pickle (loading it can run code), and every entry steers what a run reads, so every cache
keeps its entries alike: read only through their own name, when the file opened and its folder are its owner's
alone (:func:`~trajscale.util.why_untrusted`); written 0600 to a temporary name in a 0700 folder, then renamed;
pruned least recently used first, the folder listed again only when a bound could have been passed; and never
failing a run (an unreadable entry is a miss, an unwritable one is skipped)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from .util import why_untrusted

log = logging.getLogger(__name__)

#: Folder -> (entries, bytes) it held at this process's last listing plus what the process wrote since.
_held: dict[Path, tuple[int, int]] = {}


def _said(path: Path, why: str) -> None:
    log.debug("not using the cache entry %s: %s", path, why)


def read(path: Path, untrusted: Callable[[Path, str], None] = _said) -> bytes | None:
    """The entry's bytes, marked used; None if missing, a link, or not its owner's alone (``untrusted`` is told why)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:   # e.g. a link planted under the entry's name
        untrusted(path, f"cannot open it safely ({exc.strerror})")
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            why = why_untrusted(os.fstat(fh.fileno())) or why_untrusted(os.stat(path.parent))
            if why:
                untrusted(path, why)
                return None
            data = fh.read()
        os.utime(path)
    except OSError as exc:
        log.debug("cannot read the cache entry %s (%s)", path, exc)
        return None
    return data


def write(path: Path, fill: Callable[[object], None], what: str, *, max_entries: int | None = None,
          max_bytes: int | None = None, untrusted: Callable[[Path, str], None] = _said) -> None:
    """Write an entry whole, then prune its folder; skipped (said at debug level) where it cannot be written."""
    import tempfile  # (with shutil, bz2, lzma, random: only a run that writes an entry imports them)

    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        why = why_untrusted(os.stat(path.parent))
        if why:
            untrusted(path.parent, why)
            return
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)   # mode 0600
        try:
            with os.fdopen(fd, "wb") as fh:
                fill(fh)
                size = fh.tell()
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except Exception as exc:   # noqa: BLE001 - what fills an entry may raise anything; the cache only misses
        log.debug("%s was not written to the cache %s (%s)", what, path, exc)
        return
    log.debug("%s cached in %s", what, path)
    count, total = _held.get(path.parent, (None, None))
    if count is not None:   # (counted as new: an entry replaced counts twice, which only lists sooner)
        count, total = count + 1, total + size
        if (max_entries is None or count <= max_entries) and (max_bytes is None or total <= max_bytes):
            _held[path.parent] = (count, total)
            return
    prune(path.parent, keep=path, max_entries=max_entries, max_bytes=max_bytes)


def prune(folder: Path, keep: Path | None = None, max_entries: int | None = None,
          max_bytes: int | None = None) -> None:
    """Remove ``folder``'s least recently used entries down to the bounds; ``keep`` (just written) stays."""
    entries = []
    with contextlib.suppress(OSError), os.scandir(folder) as it:
        for e in it:
            if not e.name.startswith(".") and e.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    st = e.stat(follow_symlinks=False)
                    entries.append((st.st_mtime, st.st_size, Path(e.path)))
    count, total = len(entries), sum(size for _, size, _ in entries)
    if (max_entries is None or count <= max_entries) and (max_bytes is None or total <= max_bytes):
        _held[folder] = (count, total)
        return
    # Over a bound: down to 7/8 of it, so that the next writes need no listing each.
    max_entries = None if max_entries is None else max(1, max_entries - max_entries // 8)
    max_bytes = None if max_bytes is None else max_bytes - max_bytes // 8
    for _, size, path in sorted(entries):
        if (max_entries is None or count <= max_entries) and (max_bytes is None or total <= max_bytes):
            break
        if path != keep:
            drop(path)
            count, total = count - 1, total - size
    _held[folder] = (count, total)


def drop(path: Path | None) -> None:
    """Remove an entry found wrong (or pruned)."""
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def encode_array(array, compress: bool = False) -> dict:
    """A NumPy array as JSON values (little-endian bytes, base64): exact, and no pickle. ``compress``: the
    bytes deflated first (a whole topology's per-atom numbers repeat: several times smaller, read faster)."""
    import base64
    import zlib

    import numpy as np

    a = np.ascontiguousarray(array)
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    raw = zlib.compress(a.tobytes(), 1) if compress else a.tobytes()
    return {"dtype": a.dtype.str, "shape": list(a.shape), "zlib" if compress else "data":
            base64.b64encode(raw).decode("ascii")}


def decode_array(value: dict, kinds: str):
    """The array :func:`encode_array` stored (a new, writable array), refused (ValueError) unless its dtype's
    kind is one of ``kinds`` (numbers, fixed-width text: never objects) and its bytes fill its shape."""
    import base64
    import zlib

    import numpy as np

    dtype = np.dtype(value["dtype"])
    if dtype.kind not in kinds:
        raise ValueError(f"unexpected dtype {dtype} in a cache entry")
    if "zlib" in value:
        shape = [int(n) for n in value["shape"]]
        # (the size the shape says, and not a byte more: a damaged or hostile entry cannot inflate further)
        want = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(value["zlib"]), want)
        if len(raw) != want or inflate.unconsumed_tail:
            raise ValueError("a compressed array's size is not its shape's")
    else:
        raw = base64.b64decode(value["data"])
    a = np.frombuffer(raw, dtype=dtype)
    return a.reshape(value["shape"]).astype(a.dtype.newbyteorder("="))
