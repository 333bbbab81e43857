"""Truncate an H5MD file left by an interrupted writer to its last complete frame.

Every time-dependent element (a group with ``value`` and ``step``) keeps as many
rows as its ``step`` has: trajscale's writers grow ``step`` only after a frame's
data is flushed, so the rows past it are a partial or reserved frame.  Chunked
datasets are resized in place; a contiguous one cannot shrink, so the file is
then copied with the rows dropped and the copy renamed over the original.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import h5py

from ..errors import InputFileError
from ..store.hdf5 import open_h5
from ..store.schema import describe
from ..util import atomic_output

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepairResult:
    """What :func:`repair` did: the complete frames kept, the rows dropped per dataset, and how."""

    path: str
    n_frames: int        # complete frames (of the first particle group)
    dropped: dict        # dataset name -> rows removed
    method: str          # "none", "resize" or "copy"


def _excess(f: h5py.File) -> dict[str, int]:
    """Dataset name -> the row count it should have, for every over-long ``value``."""
    out: dict[str, int] = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Group) and "value" in obj and "step" in obj:
            value, step = obj["value"], obj["step"]
            if isinstance(value, h5py.Dataset) and isinstance(step, h5py.Dataset) and step.ndim == 1 \
                    and value.ndim >= 1 and value.shape[0] > step.shape[0]:
                out[value.name] = int(step.shape[0])

    f.visititems(visit)
    return out


def repair(path: str | os.PathLike) -> RepairResult:
    """Drop the rows after the last complete frame of ``path`` (atomically)."""
    p = Path(path)
    with open_h5(p, "r") as f:
        info = describe(f)
        excess = _excess(f)
        before = {name: f[name].shape[0] for name in excess}
        growable = all(f[name].maxshape[0] is None for name in excess)
    dropped = {name: before[name] - n for name, n in excess.items()}
    if not excess:
        return RepairResult(str(p), info.n_frames, {}, "none")
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
    return RepairResult(str(p), info.n_frames, dropped, method)


def _copy_truncated(p: Path, excess: dict[str, int]) -> None:
    """Copy ``p`` with the over-long datasets cut, then rename the copy over it (fsynced, as every output)."""
    try:
        with atomic_output(p, overwrite=True) as tmp, h5py.File(p, "r") as src, h5py.File(tmp, "w") as dst:
            for k, v in src.attrs.items():
                dst.attrs[k] = v
            for name in src:
                src.copy(src[name], dst, name=name)   # H5Ocopy keeps the hard links within
            for name, n in excess.items():
                old = src[name]
                del dst[name]
                ds = dst.create_dataset(name, shape=(n, *old.shape[1:]), dtype=old.dtype)
                if n:
                    ds[...] = old[:n]
                for k, v in old.attrs.items():
                    ds.attrs[k] = v
    except OSError as exc:   # atomic_output removed the copy
        raise InputFileError(p, f"cannot rewrite the file ({exc})") from None
