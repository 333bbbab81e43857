"""Rows of frames read from a local file descriptor by a compiled loop: ``pread`` of each frame's runs into a
row buffer that stays in cache, and the asked columns gathered from it while they are there.

What a local file offers beyond byte ranges: a reader that knows each frame's byte offset (an H5MD dataset's
chunk addresses, an mdCATH member's) hands the whole read to :func:`pread_gather`, which takes no
interpreter lock while it reads (a read through ranges costs an allocation and a copy per range).
"""

from __future__ import annotations

from ._pread import pread_gather

__all__ = ["pread_gather"]
