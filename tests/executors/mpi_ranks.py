"""Find the Python ranks of a running ``mpiexec`` job by their command line, for tests that signal them."""

from __future__ import annotations

import os
from collections.abc import Callable


def mpi_ranks(is_rank: Callable[[list[bytes]], bool]) -> dict[int, int]:
    """rank -> pid of the processes with a ``PMI_RANK`` whose command line (its arguments) passes ``is_rank``."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read().split(b"\0")
            with open(f"/proc/{d}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        rank = [e.split(b"=", 1)[1] for e in env if e.startswith(b"PMI_RANK=")]
        if rank and is_rank(cmd):
            found[int(rank[0])] = int(d)
    return found
