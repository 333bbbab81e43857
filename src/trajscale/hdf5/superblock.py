"""What an HDF5 file's superblock records, read from its first bytes without HDF5: the size of its
addresses, and the file size it needs (the end of the space HDF5 has allocated)."""

from __future__ import annotations

import os

from ..util import HDF5_MAGIC


def superblock_offset_size(head: bytes) -> int | None:
    """Bytes per file address of the superblock at the start of ``head``; None where it holds none this reads."""
    if len(head) < 16 or head[:8] != HDF5_MAGIC or head[8] not in (0, 1, 2, 3):
        return None
    size = head[13] if head[8] in (0, 1) else head[9]   # superblock versions 0-1, 2-3
    return size if size in (2, 4, 8) else None


def superblock_end(head: bytes) -> int | None:
    """The file size the superblock at the start of ``head`` records (base plus end-of-file address); None where
    ``head`` holds no superblock this reads."""
    size = superblock_offset_size(head)
    if size is None or len(head) < 64:
        return None
    # the addresses: versions 0-1 after 16 bytes of versions and sizes and 8 of K values and flags (version 1:
    # 4 more), then base, free-space info, end of file; versions 2-3 after 12 bytes: base, extension, end of file
    base = 12 if head[8] in (2, 3) else 24 + (4 if head[8] == 1 else 0)
    base_addr, eof_addr = (int.from_bytes(head[a:a + size], "little") for a in (base, base + 2 * size))
    undefined = (1 << 8 * size) - 1
    return None if undefined in (base_addr, eof_addr) else base_addr + eof_addr


def cut_short(head: bytes, size: int) -> str | None:
    """What is said of a file of ``size`` bytes that begins with ``head`` (64 bytes or more) and is shorter than
    its superblock records; None where it is not."""
    end = superblock_end(head)
    if end is None or size >= end:
        return None
    return (f"truncated: it has {size} bytes, its superblock records {end} (a copy cut short, or a writer killed "
            "while HDF5 flushed)")


def stored_size(path: str | os.PathLike) -> tuple[int | None, int]:
    """The size the superblock of the file at ``path`` records, and its size now (OSError if unreadable)."""
    with open(path, "rb") as fh:
        return superblock_end(fh.read(64)), os.fstat(fh.fileno()).st_size
