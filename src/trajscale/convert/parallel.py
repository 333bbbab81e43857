"""``convert`` under MPI: each rank reads its own range of frames and writes it into one file.

Rank r converts output frames ``[r n / P, (r + 1) n / P)`` through
``ParallelWriter.write_frames``.  The step/time renumbering of concatenated
files (``stream.Renumberer``) needs each file's first frames and the previous
file's last one; those few frames are read first on every rank, so every rank
shifts its frames as a serial conversion would.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time

import numpy as np

from ..block import Block
from ..errors import InputFileError
from ..pwrite import ParallelWriter
from ..store.layout import Layout
from ..util import check_output_path, temporary_name
from .stream import Renumberer, frame_plan, iter_blocks

log = logging.getLogger(__name__)


class _Shifts(Renumberer):
    """A Renumberer that replays shifts computed beforehand, one per file this rank touches."""

    def __init__(self, shifts: list[tuple[int, float]]) -> None:
        super().__init__()
        self._todo = list(shifts)

    def start_file(self, first: Block, path: str) -> None:
        self.shift_step, self.shift_time = self._todo.pop(0)


def _meta(src, frames: np.ndarray) -> Block:
    """Step and time of a few frames (one atom read)."""
    blocks = [src.read(int(i), int(i) + 1, np.array([0])) for i in frames]
    return Block(0, len(blocks), np.zeros((len(blocks), 1, 3), np.float32), np.zeros((len(blocks), 6), np.float32),
                 np.concatenate([b.time for b in blocks]), np.concatenate([b.step for b in blocks]))


def file_shifts(sources, plans) -> tuple[list[tuple[int, float]], int]:
    """Per input file with frames: the (step, time) shift a serial pass would apply; files renumbered."""
    if sum(1 for p in plans if len(p)) <= 1:   # one file: nothing to renumber, nothing to read
        return [(0, 0.0) if len(p) else None for p in plans], 0
    r = Renumberer()
    out = []
    for src, frames in zip(sources, plans):
        if not len(frames):
            out.append(None)
            continue
        r.start_file(_meta(src, frames[:2]), src.path)
        out.append((r.shift_step, r.shift_time))
        r.apply(_meta(src, frames[-1:]))
    return out, r.renumbered


def convert_parallel(comm, sources, universe_atoms, output: str, *, layout: Layout, atoms, fields,
                     start, stop, step, has_box: bool, overwrite: bool, summary_cls, units: dict,
                     group: str, precision: float | None = None, encoding: str = "floats"):
    """Write ``sources`` to ``output`` from every rank of ``comm`` (called by ``convert``)."""
    from mpi4py import MPI

    t0 = time.perf_counter()
    rank, size = comm.Get_rank(), comm.Get_size()
    plans, n_frames = frame_plan([s.n_frames for s in sources], start, stop, step)
    if n_frames == 0:
        raise InputFileError(sources[0].path, "the frame range selects no frames")
    shifts, renumbered = file_shifts(sources, plans)
    picked = np.arange(sum(s.n_frames for s in sources))[slice(start, stop, step)]
    i0, i1 = rank * n_frames // size, (rank + 1) * n_frames // size
    mine = [sh for sh, frames in zip(shifts, _split(sources, plans, picked, i0, i1)) if len(frames)]
    stride = step or 1
    blocks = iter_blocks(sources, atoms, fields, int(picked[i0]), int(picked[i1 - 1]) + 1, stride,
                         _Shifts(mine)) if i1 > i0 else iter([])
    check_output_path(output, overwrite)   # on every rank: all raise together
    tmp = comm.bcast(str(temporary_name(output)) if rank == 0 else None, root=0)
    ok = False
    try:
        with ParallelWriter(tmp, len(universe_atoms), comm=comm, strategy="collective", layout=layout,
                            n_frames=n_frames, velocities="velocity" in fields, forces="force" in fields,
                            box="triclinic" if has_box else None, group=group, units=units,
                            topology=universe_atoms if rank == 0 else None, precision=precision,
                            encoding=encoding) as w:
            at = i0
            while True:
                block = next(blocks, None)
                if comm.allreduce(block is None, op=MPI.LAND):
                    break
                if block is None:
                    empty = np.empty((0, len(universe_atoms), 3), np.float32)
                    w.write_frames(at, empty, step=np.empty(0), time=np.empty(0), box=None,
                                   velocities=empty, forces=empty)
                    continue
                w.write_frames(at, block.positions, step=block.step, time=block.time,
                               box=block.box if has_box else None, velocities=block.velocities,
                               forces=block.forces)
                at += block.n_frames
        ok = comm.allreduce(True, op=MPI.LAND)
        if rank == 0:
            os.replace(tmp, output)
        comm.Barrier()
    finally:
        if not ok and rank == 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    if renumbered and rank == 0:
        log.warning("renumbered step and time of %d input file(s) so they keep increasing "
                    "(H5MD requires increasing steps)", renumbered)
    return summary_cls(str(output), n_frames, len(universe_atoms), fields, layout.describe(), renumbered,
                       time.perf_counter() - t0, os.path.getsize(output))


def _split(sources, plans, picked: np.ndarray, i0: int, i1: int):
    """Per file, the (global) input frames of output range [i0, i1)."""
    lo, hi = (int(picked[i0]), int(picked[i1 - 1]) + 1) if i1 > i0 else (0, 0)
    offsets = np.cumsum([0] + [s.n_frames for s in sources])
    return [g[(g >= lo) & (g < hi)] for g in (frames + off for frames, off in zip(plans, offsets))]
