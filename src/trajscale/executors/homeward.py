"""A pool worker's results sent home through a file in shared memory (``/dev/shm``), not the pool's pipe.

A task's partials can be large: an ensemble's per-frame features are hundreds of MB a run, a few kB of
work per member each. Through the pipe every array is copied into a pickle, written in 64 kB pieces,
gathered into another buffer and copied again out of the pickle: more CPU than a small member's analysis.
Spilled, the arrays are written once into a file in shared memory (pickle protocol 5, out of band) and
read once by the root into one buffer the unpickled arrays share: the same bytes, copied twice in all.
Small results, and systems without ``/dev/shm``, use the pipe.  The root removes each file as it reads
it, and the pool's folder when it closes.  Imported by a worker first: nothing heavy here.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
from dataclasses import dataclass

#: Where the files are made: memory, not a disk (a folder per pool; None where there is none).
SHARED_MEMORY = "/dev/shm"
#: Results whose arrays hold fewer bytes travel through the pipe (a file costs more than their copies).
MIN_SPILL_BYTES = 256 * 1024
#: Each array's bytes start at a multiple of this in the file and in the root's buffer (as NumPy aligns them).
ALIGN = 64


@dataclass(frozen=True)
class Spilled:
    """A worker's results in a file: ``header`` their pickle (protocol 5) without the arrays' bytes, which
    lie in the file at ``path``, ``sizes`` bytes each, each at ``offsets`` (multiples of :data:`ALIGN`)."""

    path: str
    header: bytes
    sizes: tuple[int, ...]
    offsets: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return self.offsets[-1] + self.sizes[-1] if self.sizes else 0


#: A pool's folder is named ``PREFIX<pid of the pool's parent>-<random>``.
PREFIX = "trajscale-results-"


def results_folder() -> str | None:
    """A new folder in shared memory for one pool's results; None where the system has none. The folders of
    parents that are gone (killed before they could remove theirs) are removed first: memory is not a disk
    that a reboot is expected to clean."""
    from ..util import process_folder

    if not os.path.isdir(SHARED_MEMORY) or not os.access(SHARED_MEMORY, os.W_OK | os.X_OK):
        return None
    try:
        return process_folder(PREFIX, SHARED_MEMORY)
    except OSError:
        return None


def spill(results, folder: str | None, min_bytes: int | None = None):
    """``results`` as a :class:`Spilled` file in ``folder`` when their arrays hold at least ``min_bytes``
    (default :data:`MIN_SPILL_BYTES`); else (no folder, small arrays, what protocol 5 cannot take, the
    memory full) ``results`` themselves."""
    if folder is None:
        return results
    min_bytes = MIN_SPILL_BYTES if min_bytes is None else min_bytes
    buffers: list[pickle.PickleBuffer] = []
    try:
        header = pickle.dumps(results, protocol=5, buffer_callback=buffers.append)
        views = [b.raw() for b in buffers]
    except Exception:   # noqa: BLE001 - the pool's own pickling says what it refuses, as without a folder
        return results
    if sum(v.nbytes for v in views) < min_bytes:
        return results
    try:
        fd, path = tempfile.mkstemp(prefix=f"{os.getpid()}-", dir=folder)   # (mode 0600)
    except OSError:   # the pool's folder is gone (it is closing)
        return results
    offsets, at = [], 0
    try:
        with os.fdopen(fd, "wb", buffering=0) as fh:
            for view in views:
                pad = -at % ALIGN
                _write_all(fh, memoryview(bytes(pad)))
                offsets.append(at + pad)
                at += pad + view.nbytes
                _write_all(fh, view)
    except OSError:   # shared memory full: the pipe
        with contextlib.suppress(OSError):
            os.unlink(path)
        return results
    return Spilled(path, header, tuple(v.nbytes for v in views), tuple(offsets))


def received(got):
    """A worker's results as it sent them: read back from their file (then removed) when spilled."""
    if not isinstance(got, Spilled):
        return got
    import numpy as np

    try:
        raw = np.empty(got.nbytes + ALIGN, np.uint8)   # (not zeroed first: every byte is read into it)
        start = -raw.ctypes.data % ALIGN
        buffer = raw[start:start + got.nbytes]
        view, done = memoryview(buffer), 0
        with open(got.path, "rb", buffering=0) as fh:
            while done < buffer.nbytes:
                n = fh.readinto(view[done:])
                if not n:
                    raise EOFError(f"{got.path}: {done} of {buffer.nbytes} bytes of a worker's results")
                done += n
    finally:
        with contextlib.suppress(OSError):
            os.unlink(got.path)
    parts = [view[at:at + size] for at, size in zip(got.offsets, got.sizes, strict=True)]
    return pickle.loads(got.header, buffers=parts)


def _write_all(fh, view: memoryview) -> None:
    while view.nbytes:
        view = view[fh.write(view):]


__all__ = ["MIN_SPILL_BYTES", "Spilled", "received", "results_folder", "spill"]
