"""The frame offsets index of an XTC or TRR: every frame's byte offset, found once from the frames' headers.

An XTC/TRR has no index of its own. The preparing process scans the headers once (no coordinates decoded; every
field checked) and ships the offsets in the Source's config (8 bytes a frame), so a worker never rebuilds them,
nor touches MDAnalysis's ``.NAME_offsets.npz`` cache (several ranks writing it at once raced, Khoshlessan et
al. 2020). Only a clean scan is cached, so ``--strict`` is never answered from a lenient scan's entry.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import io
import json
import logging
import os
import struct

import numpy as np

from ..errors import InputFileError

log = logging.getLogger(__name__)

#: Block size of the caching file object a header scan of an object reads through (a 100 MB XTC: 13 requests).
SCAN_BLOCK_BYTES = 8 * 1024**2
#: Block size when only the first frame's header is read (a shipped TRR's fields): the object's first block.
HEAD_BLOCK_BYTES = 256 * 1024
#: The cache's version: entries of another layout are ignored.
CACHE_VERSION = 2


def encode_offsets(offsets) -> str:
    """Frame offsets as one JSON-plain string (base64 of little-endian int64): 8 bytes a frame, not ~36."""
    return base64.b64encode(np.asarray(offsets, dtype="<i8").tobytes()).decode("ascii")


def decode_offsets(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<i8").astype(np.int64)


def xdr_format(head: bytes) -> str | None:
    """XTC or TRR from a file's first 24 bytes (its magic number; a TRR's version string), else None."""
    if len(head) < 8:
        return None
    magic = struct.unpack(">i", head[:4])[0]
    if magic == 1995:
        return "XTC"
    return "TRR" if magic == 1993 and b"GMX_trn_file" in head else None


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


#: Whether a cut-short last frame is refused when the caller does not say (the CLI's ``--strict`` sets it).
_STRICT = contextvars.ContextVar("trajscale_strict_parts", default=False)


@contextlib.contextmanager
def refuse_partial_frames(strict: bool = True):
    """Within the block, a part whose last frame is cut short is refused (``strict=True``) or left out (False)."""
    token = _STRICT.set(bool(strict))
    try:
        yield
    finally:
        _STRICT.reset(token)


def _is_path(path) -> bool:
    """A file's path (str, bytes, os.PathLike), not a file-like object holding its bytes."""
    return isinstance(path, (str, bytes, os.PathLike))


def _name(path) -> str:
    """How a message names the file: its path, or a file-like object's ``name`` (its type's without one)."""
    if _is_path(path):
        return os.fsdecode(path)
    try:
        return str(path.name)
    except AttributeError:
        return type(path).__name__


def scan(path, fmt: str, first_only: bool = False, strict: bool | None = None,
         damaged: list | None = None) -> tuple:
    """``(n_atoms, offsets, fields, steps, times)`` of an XTC/TRR (a path or a binary file-like object) from its
    frames' headers; ``first_only``: the first frame's, for a worker that was shipped the offsets.

    A last frame cut short is left out with one warning naming the file, frame and bytes; damage after whole
    frames ends the trajectory at the last whole frame, with one warning naming frame and byte. Either is
    appended to ``damaged`` (damage's description, or None for a cut-short frame). ``strict`` (default:
    :func:`refuse_partial_frames`) refuses the file instead."""
    from ._xdr import XDRFormatError, scan_trr, scan_xtc

    strict = _STRICT.get() if strict is None else strict
    dropped: list = []   # the scan tells a cut-short last frame from damage; strict refuses either below
    name = _name(path)
    try:
        found = (scan_xtc if fmt == "XTC" else scan_trr)(path, 1 if first_only else -1, partial_last=dropped)
    except OSError as exc:
        raise InputFileError(name, f"cannot be read as {fmt}: {one_line(exc)}") from None
    except XDRFormatError as exc:
        if strict or first_only or not len(exc.offsets):
            hint = ""
            if strict and "cut short" in str(exc):
                hint = " (without --strict its complete frames are read)"
            elif strict and len(exc.offsets):
                hint = " (without --strict the whole frames before it are read)"
            raise InputFileError(name, f"cannot be read as {fmt}: {one_line(exc)}{hint}") from None
        log.warning("%s: damaged after frame %d: %s; the %d whole frames before byte %d are read, nothing after "
                    "them (--strict refuses such a file)", name, len(exc.offsets) - 1, one_line(exc),
                    len(exc.offsets), int(exc.complete_bytes))
        if damaged is not None:
            damaged.append(f"damaged after frame {len(exc.offsets) - 1} (byte {int(exc.complete_bytes)}): "
                           f"{one_line(exc)}")
        return exc.n_atoms, exc.offsets, exc.fields, exc.steps, exc.times
    if dropped and not first_only:
        frame, offset, present, declared = dropped[0]
        if strict:
            raise InputFileError(name, f"cannot be read as {fmt}: frame {frame} at byte {offset} is cut short "
                                       f"(the file ends at byte {offset + present}) (without --strict its "
                                       "complete frames are read)")
        log.warning("%s: its last frame (frame %d at byte %d) is cut short: %d of its %d bytes are in the "
                    "file; the %d complete frames are read (--strict refuses such a file)",
                    name, frame, offset, present, declared, frame)
        if damaged is not None:
            damaged.append(None)
    return found


def index(store, fmt: str, strict: bool | None = None, view=None) -> tuple:
    """``(view, n_atoms, offsets, fields, steps, times, damaged)`` of the XTC/TRR in ``store``, through ``view``:
    from the cache where the view keeps scans, else one scan, then kept."""
    from ..storage.files import as_file

    made, view = view is None, view or as_file(store)
    kept = view.keeps("offsets", f"{CACHE_VERSION}:{fmt}", ".npz")   # (None: a file at hand, scanned, none kept)
    try:
        found = _load(kept, store.identity, store.size) if kept is not None else None
        if found is not None:
            log.debug("%s: frame offsets from the local cache (%d frames)", view.name, len(found["offsets"]))
            return (view, found["n_atoms"], found["offsets"], found["fields"], found["steps"], found["times"],
                    None)
        before = (store.fetched() or {}).get("requests", 0)
        notes: list = []
        n_atoms, offsets, fields, steps, times = scan(view.scan_source(SCAN_BLOCK_BYTES), fmt, strict=strict,
                                                      damaged=notes)
        log.debug("%s: frame offsets scanned (%d frames) in %d requests", view.name, len(offsets),
                  (store.fetched() or {}).get("requests", 0) - before)
    except BaseException:
        if made:
            view.close()
        raise
    if not notes and kept is not None:
        _save(kept, store.identity, {"n_atoms": n_atoms, "offsets": offsets, "fields": fields, "steps": steps,
                                     "times": times})
    return view, n_atoms, offsets, fields, steps, times, next((n for n in notes if n), None)


def first_frame(view, fmt: str) -> tuple:
    """``(n_atoms, offsets, fields, steps, times)`` of the first frame only, for a reader shipped the offsets."""
    return scan(view.scan_source(HEAD_BLOCK_BYTES), fmt, first_only=True)


def _load(path, identity: tuple, size: int) -> dict | None:
    """The scan kept at ``path`` of the bytes ``identity`` names, None when it is not theirs."""
    from ..storage import cache

    raw = cache.read(path)
    if raw is None:
        return None
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("identity") != json.loads(json.dumps(list(identity))):
                return None
            found = {"n_atoms": int(meta["n_atoms"]), "fields": tuple(meta["fields"]),
                     "offsets": np.asarray(z["offsets"], np.int64),
                     "steps": np.asarray(z["steps"], np.int64), "times": np.asarray(z["times"], np.float64)}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if len(found["offsets"]) and int(found["offsets"][-1]) >= size:
        return None
    return found


def _save(path, identity: tuple, found: dict) -> None:
    """Keep a clean scan of the bytes ``identity`` names at ``path`` (skipped if unwritable)."""
    from ..storage import cache

    meta = {"identity": list(identity), "n_atoms": int(found["n_atoms"]), "fields": list(found["fields"])}
    cache.write(path, lambda fh: np.savez(fh, meta=np.array(json.dumps(meta)),
                                          offsets=np.asarray(found["offsets"], np.int64),
                                          steps=np.asarray(found["steps"], np.int64),
                                          times=np.asarray(found["times"], np.float64)),
                f"{identity[0]}: frame offsets")


def frame_spans(offsets: np.ndarray, size: int, frames: np.ndarray) -> list[tuple[int, int]]:
    """Byte ranges holding ``frames`` (sorted frame numbers): consecutive frames in one range."""
    ends = np.append(offsets[1:], size)
    spans: list[list[int]] = []
    last = None
    for k in frames:
        a, b = int(offsets[k]), int(ends[k])
        if spans and last is not None and k == last + 1:
            spans[-1][1] = b
        else:
            spans.append([a, b])
        last = k
    return [(a, b) for a, b in spans]


def scan_part(path, strict: bool | None = None) -> dict:
    """``{"path", "format", "n_frames", "n_atoms", "offsets"}`` of an XTC/TRR (a path, or a binary file-like
    object: ``"path"`` is then its ``name``) from its frame headers, as :func:`scan` checks them."""
    from pathlib import Path

    from ..sources.base import file_head

    name = _name(path)
    if not _is_path(path):
        path.seek(0)
        fmt = xdr_format(bytes(path.read(24) or b""))
    else:
        fmt = xdr_format(file_head(os.fsdecode(path), 24)) or SUFFIXES.get(Path(os.fsdecode(path)).suffix.lower())
    if fmt is None:
        raise InputFileError(name, "is not an XTC or TRR file")
    n_atoms, offsets, *_ = scan(path, fmt, strict=strict)
    log.debug("%s: frame offsets scanned (%d frames)", name, len(offsets))
    return {"path": name, "format": fmt, "n_frames": len(offsets), "n_atoms": n_atoms,
            "offsets": encode_offsets(offsets)}


#: File name endings of the formats (asked only when the bytes tell no format).
SUFFIXES = {".xtc": "XTC", ".trr": "TRR"}


__all__ = ["CACHE_VERSION", "HEAD_BLOCK_BYTES", "SCAN_BLOCK_BYTES", "SUFFIXES", "decode_offsets", "encode_offsets",
           "first_frame", "frame_spans", "index", "one_line", "refuse_partial_frames", "scan", "scan_part",
           "xdr_format"]
