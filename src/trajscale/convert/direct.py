"""Parallel convert into one preallocated file: workers ``pwrite`` their frames, nothing is joined.

An output with no filter is created at its final length with its storage allocated, so each frame has a fixed
byte address (:mod:`trajscale.h5md.direct_write`): no segment file, no join copy. A worker counts frames in its
own record only after an ``fdatasync``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from ..block import FIELD_ATTRS, split_frames
from ..errors import OutputError
from ..h5md import direct_write
from ..h5md.direct_write import DirectWrites, RowTarget, plan_writes
from ..h5md.layout import Layout
from ..h5md.writer import box_edges, in_file_units
from ..units import factor
from ..util import fsync_path, polling_for_stop, raise_if_stopped
from .frames import ConvertJob, iter_slabs
from .pool import frame_bar, run_tasks
from .resume import Partial, load_record, save_record

log = logging.getLogger(__name__)


def eligible(layout: Layout, precision: float | None) -> bool:
    """True when an output of ``layout`` (and ``precision``) has no filter, so frames can be written in place."""
    return (direct_write.available() and not layout.compression and not layout.fletcher32
            and layout.chunks != "h5py" and precision is None)


def plan(n_frames: int, n_workers: int, chunk_frames: int) -> dict:
    """The fresh record of a direct-write run: one range per worker, cut on chunk boundaries (each worker's
    writes then stay sequential)."""
    ranges = split_frames(n_frames, n_workers, align=chunk_frames)
    return {"ranges": [[r.start, r.stop] for r in ranges]}


def prepare(partial: Partial, create) -> dict[str, RowTarget]:
    """Create the partial file (``create(path)`` returns the names of its per-frame datasets) unless the
    record says it was made; return the planned row addresses."""
    rec = partial.record
    fresh = not rec.get("created") or not partial.tmp.exists()
    if fresh:
        rec["datasets"] = create(partial.tmp)
        fsync_path(partial.tmp)   # the structure is on disk before any worker counts a frame in it
        for k in range(len(rec["ranges"])):
            save_record(partial.worker_record(k), {"done": 0})
        rec["created"] = True
        partial.save()
    # probed against HDF5 once, when made: a resumed file's counted frames are never touched
    return plan_writes(partial.tmp, rec["datasets"], probe=fresh)


def run_ranges(partial: Partial, fn, args: tuple, executor: str, n_workers: int, bar=None,
               options: dict | None = None) -> None:
    """Run ``fn(*args, a, b, path, record path)`` for every range the records do not count whole, then
    check that they do (OutputError otherwise); ``options``: the executor's own."""
    tasks, counted = [], 0
    for k, (a, b) in enumerate(partial.record["ranges"]):
        done = int((load_record(partial.worker_record(k)) or {}).get("done", 0))
        counted += done
        if bar is not None:
            bar.update(done)
        if done < b - a:
            tasks.append((*args, a, b, str(partial.tmp), str(partial.worker_record(k))))
    ranges = partial.record["ranges"]
    partial.say_resumed(counted, ranges[-1][1] - ranges[0][0] if ranges else 0, contiguous=len(ranges) == 1)
    run_tasks(fn, tasks, executor, n_workers, on_done=None if bar is None else lambda i, n: bar.update(n),
              options=options)
    for k, (a, b) in enumerate(partial.record["ranges"]):
        done = (load_record(partial.worker_record(k)) or {}).get("done")
        if done != b - a:
            raise OutputError(partial.final, f"frames {a}-{b}: {done} of {b - a} written")


def write(job: ConvertJob, partial: Partial, *, executor: str, n_workers: int, progress: bool,
          options: dict | None = None) -> None:
    """Write (or finish) ``partial`` as its direct-write record says, then rename it to the final name."""
    from .segmented import check_complete

    def create(path: Path) -> list[str]:
        with job.writer(path, job.n_frames) as w:
            return w.preallocate()

    targets = prepare(partial, create)
    with frame_bar(job.n_frames, progress, "convert") as bar:
        run_ranges(partial, write_range_direct, (job, targets), executor, n_workers, bar, options)
    check_complete(partial.tmp, job.n_frames, partial.final)
    partial.finish()


def dataset_names(job: ConvertJob) -> dict[str, str]:
    """Quantity (field, ``box``, ``step``, ``time``, ``obs:NAME``) -> its dataset in the output."""
    g = f"/particles/{job.group}"
    out = {fl: f"{g}/{fl}/value" for fl in job.fields}
    out["step"], out["time"] = f"{g}/{job.fields[0]}/step", f"{g}/{job.fields[0]}/time"   # shared by all
    if job.box is not None:
        out["box"] = f"{g}/box/edges/value"
    out.update({f"obs:{name}": f"/observables/{name}/value" for name in job.observables or {}})
    return out


#: Output bytes a worker writes between two counts (fdatasync, then its record): between counts the kernel
#: writes the pages back while the worker decodes, where a sync per 64 MiB slab stalled it on every one.  A
#: crash loses at most this much per worker.  TRAJSCALE_CONVERT_COUNT_MB overrides.
COUNT_BYTES = int(float(os.environ.get("TRAJSCALE_CONVERT_COUNT_MB", 512)) * 1024**2)


def write_range_direct(job: ConvertJob, targets: dict[str, RowTarget], i0: int, i1: int, path: str,
                       record_path: str) -> int:
    """Worker: write output frames ``[i0, i1)`` at their addresses in ``path``, after those ``record_path``
    counts; return the frames written now.  Frames are counted every :data:`COUNT_BYTES` after an
    fdatasync; a recorded SIGTERM stops it between slabs.
    """
    record = load_record(record_path) or {}
    done = int(record.get("done", 0))
    if done >= i1 - i0:
        return 0
    names = dataset_names(job)
    factors = {q: factor(q, u) for q, u in job.units.items()}
    at, opened, uncounted = i0 + done, {}, 0
    frame_bytes = sum(t.row_bytes for t in targets.values())
    try:
        with DirectWrites(path, targets) as dw, polling_for_stop():
            for b, step, t, obs in iter_slabs(job, at, i1, None, opened):
                n = len(step)
                for fl in job.fields:
                    dw.write(names[fl], at, in_file_units(getattr(b, FIELD_ATTRS[fl]), factors[fl]))
                if job.box is not None:
                    dw.write(names["box"], at, box_edges(b.box, n, factors["box"], job.box))
                dw.write(names["step"], at, np.asarray(step, np.int64))
                dw.write(names["time"], at, in_file_units(t, factors["time"], np.float64))
                for name, val in obs.items():
                    dw.write(names[f"obs:{name}"], at, val)
                at += n
                uncounted += n
                if uncounted * frame_bytes >= COUNT_BYTES or at == i1:
                    dw.sync()   # on disk before the record counts it
                    record["done"] = at - i0
                    save_record(record_path, record)
                    uncounted = 0
            raise_if_stopped()
    finally:
        for src in opened.values():
            src.close()
    return i1 - i0 - done
