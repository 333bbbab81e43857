"""Truncate an H5MD file left by an interrupted writer to its last complete frame.

Writers grow ``step`` then ``time`` only after a frame's data is flushed, so the rows past them are a partial
frame. A contiguous dataset cannot shrink, so its file is copied. A file shorter than its superblock records
is first extended with zeros, as HDF5 would have: the missing end is space for rows never written.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import h5py

from ..errors import InputFileError
from ..h5md.schema import describe
from ..hdf5.hdf5 import open_h5
from ..hdf5.superblock import stored_size
from ..util import atomic_output

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepairResult:
    """What :func:`repair` did: the complete frames kept, the rows dropped per dataset, and how."""

    path: str
    n_frames: int        # complete frames (of the first particle group)
    dropped: dict        # dataset name -> rows removed
    method: str          # "none", "resize" or "copy" (rows), or "extend" (only the file's end restored)
    extended: int = 0    # bytes added at the end (a file left shorter than its superblock records)


def _excess(f: h5py.File) -> dict[str, int]:
    """Dataset name -> the row count it should have, for every ``value``, ``step`` or ``time`` too long (a
    shared ``step`` or ``time`` named once)."""
    out: dict[str, int] = {}
    seen: set = set()

    def visit(name, obj):
        if not (isinstance(obj, h5py.Group) and "value" in obj and "step" in obj):
            return
        rows = [obj[k] for k in ("value", "step", "time")
                if k in obj and isinstance(obj[k], h5py.Dataset) and obj[k].ndim >= 1]
        if len(rows) < 2 or rows[0].name != obj["value"].name or rows[1].name != obj["step"].name:
            return   # no per-frame value and step: not an element an interrupted writer grows
        n = min(ds.shape[0] for ds in rows)
        for ds in rows:
            if ds.shape[0] > n and ds.id not in seen:
                seen.add(ds.id)
                out[ds.name] = n

    f.visititems(visit)
    return out


def repair(path: str | os.PathLike) -> RepairResult:
    """Drop the rows after the last complete frame of ``path`` (atomically)."""
    p = Path(path)
    was = _extend_cut_short(p)
    try:
        with open_h5(p, "r") as f:
            try:
                info = describe(f)
                excess = _excess(f)
                before = {name: f[name].shape[0] for name in excess}
                growable = all(f[name].maxshape[0] is None for name in excess)
            except (OSError, RuntimeError, KeyError, ValueError) as exc:   # HDF5's words for damaged metadata
                raise InputFileError(p, f"its HDF5 metadata is damaged ({exc}); it cannot be repaired") from None
    except BaseException:
        if was is not None:   # not a file a killed writer left: as it was
            os.truncate(p, was)
        raise
    extended = 0 if was is None else p.stat().st_size - was
    if extended:
        log.info("%s: extended from %d to %d bytes, the size its superblock records", p, was, was + extended)
    dropped = {name: before[name] - n for name, n in excess.items()}
    if not excess:
        return RepairResult(str(p), info.n_frames, {}, "extend" if extended else "none", extended)
    if growable:
        with open_h5(p, "r+") as f:
            for name, n in excess.items():
                f[name].resize(n, axis=0)
        method = "resize"
    else:
        _copy_truncated(p, excess)
        method = "copy"
    log.info("%s: %d complete frames kept; dropped %s", p, info.n_frames,
             ", ".join(f"{k} ({v} rows)" for k, v in dropped.items()))
    return RepairResult(str(p), info.n_frames, dropped, method, extended)


def _extend_cut_short(p: Path) -> int | None:
    """Extend ``p`` to the size its superblock records if it is shorter; its size before (None: left as is)."""
    try:
        end, size = stored_size(p)
    except OSError:
        return None   # (missing, a folder, unreadable: the open says which)
    if end is None or size >= end:
        return None
    try:
        os.truncate(p, end)
    except OSError as exc:
        raise InputFileError(p, f"it has {size} bytes but its superblock records {end}, and it cannot be "
                                f"extended ({exc.strerror})") from None
    return size


def _copy_truncated(p: Path, excess: dict[str, int]) -> None:
    """Copy ``p`` with the over-long datasets cut, then rename the copy over it (fsynced, as every output)."""
    try:
        with atomic_output(p, overwrite=True) as tmp, h5py.File(p, "r") as src, h5py.File(tmp, "w") as dst:
            for k, v in src.attrs.items():
                dst.attrs[k] = v
            for name in src:
                src.copy(src[name], dst, name=name)   # H5Ocopy keeps the hard links within
            links = _hard_links(src)
            for name, n in excess.items():
                old = src[name]
                del dst[name]
                ds = dst.create_dataset(name, shape=(n, *old.shape[1:]), dtype=old.dtype,
                                        maxshape=old.maxshape, chunks=old.chunks)
                if n:
                    ds[...] = old[:n]
                for k, v in old.attrs.items():
                    ds.attrs[k] = v
                for other in links[old.id]:   # a shared step/time stays one dataset
                    if other != name:
                        del dst[other]
                        dst[other] = ds
    except OSError as exc:   # atomic_output removed the copy
        raise InputFileError(p, f"cannot rewrite the file ({exc})") from None


def _hard_links(f: h5py.File) -> dict:
    """Object id -> every path that reaches it by hard links."""
    out: dict = {}

    def visit(name, link):
        if isinstance(link, h5py.HardLink):
            out.setdefault(f[name].id, []).append("/" + name)

    f.visititems_links(visit)
    return out
