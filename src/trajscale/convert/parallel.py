"""``convert`` under MPI: every rank reads its own slabs of frames and writes them into one file, resumably.

Every rank plans the same join of the input files, so every rank shifts its frames as a serial conversion would.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time

import numpy as np

from ..block import Block
from ..progress import progress_bar
from ..pwrite import ParallelWriter
from ..util import polling_for_stop, slow_phase_for_tests
from . import stream
from .pool import on_root, stop_together
from .resume import load_record, save_record

log = logging.getLogger(__name__)


def convert_parallel(comm, job, sources, universe_atoms, partial, *, resume: bool, summary_cls,
                     progress: bool = False):
    """Write ``job`` into ``partial`` from every rank of ``comm``, resumably (called by ``convert``).

    In each round rank ``r`` writes the ``r``-th chunk-aligned slab after the frames already counted, so every
    round completes a prefix of the file, committed durably, then counted by rank 0: a resume on any number of
    ranks continues there. A SIGTERM is acted on by every rank together at the next round.
    """
    from .segmented import check_complete, chunk_frames

    t0 = time.perf_counter()
    rank = comm.Get_rank()
    n_frames = job.n_frames
    # The record: made (or checked, on --resume) by rank 0; its verdict reaches every rank.
    record = on_root(comm, lambda: begin_mpi_record(partial, resume))
    done = int(record.get("done", 0))
    cf = chunk_frames(job)
    per = max(1, stream.SLAB_BYTES // max(1, sources[0].bytes_per_frame(job.atoms, job.fields)))
    slab = max(cf, per // cf * cf)
    has_box = job.box is not None
    kw = dict(comm=comm, strategy="collective", layout=job.layout, n_frames=n_frames,
              velocities="velocity" in job.fields, forces="force" in job.fields, box=job.box, group=job.group,
              units=job.units, precision=job.precision, encoding=job.encoding,
              reference=job.reference)
    ok = False
    if rank == 0:
        partial.say_resumed(done, n_frames)
    try:
        with polling_for_stop(), progress_bar(n_frames, progress and rank == 0, desc="convert", unit="frame",
                                              initial=done, leave=True) as bar:
            if done:
                w = ParallelWriter(partial.tmp, len(universe_atoms), resume_at=done, **kw)
            else:
                w = ParallelWriter(partial.tmp, len(universe_atoms), overwrite=True,
                                   topology=universe_atoms if rank == 0 else None, **kw)
            with w:
                while w.n_frames < n_frames:
                    stop_together(comm)
                    a = min(n_frames, w.n_frames + rank * slab)
                    b = min(n_frames, a + slab)
                    # TRAJSCALE_TEST_SLOW_READ: a signal's tests need time to land (as a serial or pool convert's)
                    slow_phase_for_tests("read", f"rank {rank}")
                    block = _read(job, sources, a, b)
                    if block is None:
                        empty = np.empty((0, len(universe_atoms), 3), np.float32)
                        w.write_frames(a, empty, step=np.empty(0), time=np.empty(0), box=None,
                                       velocities=empty, forces=empty)
                    else:
                        w.write_frames(a, block.positions, step=block.step, time=block.time,
                                       box=block.box if has_box else None, velocities=block.velocities,
                                       forces=block.forces)
                    if rank == 0:   # the commit is published (in the file): the record may count it
                        save_record(partial.record_path, {**partial.record, "done": w.n_frames})
                        bar.update(w.n_frames - bar.n)
        on_root(comm, lambda: (check_complete(partial.tmp, n_frames, partial.final), partial.finish()))
        ok = True
    except (SystemExit, KeyboardInterrupt):
        ok = True   # kept for --resume
        raise
    finally:
        if not ok and rank == 0:   # an error: nothing half-written stays behind
            partial.discard(release=True)
    return summary_cls(str(partial.final), n_frames, len(universe_atoms), job.fields, job.layout.describe(),
                       0, time.perf_counter() - t0, os.path.getsize(partial.final))


def begin_mpi_record(partial, resume: bool) -> dict:
    """Rank 0 of an MPI convert or rechunk: load (``resume``) or start the record of rounds; a record of 0
    frames starts afresh (an interrupt before the first count may leave no file)."""
    if resume and (load_record(partial.record_path) or {}).get("done") == 0 and not partial.tmp.exists():
        partial.tmp.touch()   # nothing was counted: begin() accepts it, and the run starts over
    partial.begin(resume, {"done": 0})
    if not partial.record.get("done"):
        partial.tmp.unlink(missing_ok=True)
    return partial.record


def _read(job, sources, a: int, b: int) -> Block | None:
    """Output frames ``[a, b)`` read from their inputs, step/time shifted as a serial pass would."""
    if b <= a:
        return None
    blocks = []
    for k, frames, shift in job.pieces(a, b):
        blk = sources[k].read(frames.start, frames[-1] + 1, job.atoms, job.fields, stride=frames.step)
        blocks.append(dataclasses.replace(blk, step=blk.step + shift[0], time=blk.time + shift[1]))
    if len(blocks) == 1:
        return blocks[0]

    def cat(name):
        vals = [getattr(x, name) for x in blocks]
        return None if vals[0] is None else np.concatenate(vals)
    return Block(0, b - a, cat("positions"), cat("box"), cat("time"), cat("step"),
                 velocities=cat("velocities"), forces=cat("forces"))
