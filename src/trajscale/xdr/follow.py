"""A growing XTC or TRR, as ``run --follow`` sees it at each poll: the frames whose every byte is in the file.

These formats have no end marker: a file ``TRAJ.done`` beside the trajectory says the writer is finished.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import DamagedFileError, InputFileError
from ..sources.follow import DONE_SUFFIX, Snapshot


def complete_offsets(path: str, fmt: str):
    """``(n_atoms, offsets, complete_bytes)`` of an XTC/TRR's frames whose bytes are all in the file now."""
    from ._xdr import XDRFormatError, scan_growing

    try:
        return scan_growing(path, fmt)
    except XDRFormatError as exc:
        raise InputFileError(path, f"cannot be read as {fmt}: {exc}") from None


def snapshot(path: str, fmt: str, topology=None, group: str | None = None,
             assume_units: str | None = None) -> Snapshot:
    """The file's whole frames now (``XDRSource``'s ``snapshots``); ``topology``, ``group``, ``assume_units`` unused."""
    from ._xdr import XDRFormatError, scan_growing
    from .source import XDRSource

    finished = Path(path + DONE_SUFFIX).exists()
    damage = None
    try:
        n_atoms, offsets, complete_bytes = scan_growing(path, fmt)
    except FileNotFoundError:   # moved away since it was found (a writer backing it up): the next look tells
        raise InputFileError(path, "moved or removed while it was read") from None
    except XDRFormatError as exc:   # the whole frames before the damage are analysed, then the run ends
        damage = f"{path}: damaged: {exc}"
        n_atoms, offsets, complete_bytes = exc.n_atoms, exc.offsets, exc.complete_bytes
        if not len(offsets):
            raise DamagedFileError(path, f"damaged before its first whole frame: {exc}") from None
    if not len(offsets):
        raise InputFileError(path, "no complete frame yet")
    try:   # (moved away after the scan: the same look again; a successor is compared with what was watched)
        trailing = max(0, os.path.getsize(path) - complete_bytes)
    except FileNotFoundError:
        raise InputFileError(path, "moved or removed while it was read") from None
    # (a file gone by now is refused by its byte store's open as no such file: an InputFileError, the same look again)
    return Snapshot(XDRSource(path, n_atoms=n_atoms, offsets=offsets, format=fmt), len(offsets), finished,
                    trailing if finished and damage is None else 0, trailing, damage)


__all__ = ["complete_offsets", "snapshot"]
