"""Run a conversion serially or as per-worker segments, then join, count and rename.

Each worker writes its chunk-aligned range into a segment with its own record, so a resume redoes only what no
record counted; the segments' stored chunks are then copied into the output (compression is not redone) or
mapped by virtual datasets.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path

import h5py

from ..block import split_frames
from ..errors import ConfigError, OutputError
from ..executor_registry import names
from ..hdf5.hdf5 import open_h5
from ..util import fsync_path, refuse_input_as_output
from .frames import ConvertJob, write_range
from .join import copy_frames, copy_structure, is_time_series, like, virtual_series
from .options import WriteOptions
from .pool import check_executor, frame_bar, run_tasks
from .resume import Partial, WriteMode, load_record, save_record

log = logging.getLogger(__name__)


def chunk_frames(job: ConvertJob) -> int:
    """Frames per stored chunk of the output (1 when contiguous or h5py's guess)."""
    shape = job.layout.chunk_shape(job.n_atoms, 4, job.n_frames)
    return shape[0] if isinstance(shape, tuple) else 1


def plan(job: ConvertJob, n_workers: int, virtual: bool) -> dict:
    """The fresh record of a segmented run: one range per worker, cut on chunk boundaries."""
    ranges = split_frames(job.n_frames, n_workers, align=chunk_frames(job))
    return {"virtual": bool(virtual), "ranges": [[r.start, r.stop] for r in ranges]}


def parts_folder(final: Path) -> Path:
    """Where ``--virtual`` keeps the segments: ``NAME.parts`` beside ``NAME`` (suffix dropped)."""
    return final.with_name(final.stem + ".parts")


def check_parts_folder(final: Path, inputs) -> None:
    """A ``--virtual`` run replaces ``NAME.parts/``: refuse when an input, or the segments an input
    maps (its own ``.parts/``, e.g. ``a.h5md`` rewritten as ``a.hdf5``), lies in it."""
    folder = parts_folder(Path(final))
    if not folder.is_dir():
        return
    mapped = [parts_folder(Path(p)) for p in inputs if p is not None]
    for entry in os.scandir(folder):
        refuse_input_as_output(entry.path, [*inputs, *mapped])


def write(job: ConvertJob, partial: Partial, *, executor: str, n_workers: int, progress: bool,
          sources=None, options: dict | None = None) -> None:
    """Write (or finish) ``partial`` as its record says, then rename it to the final name."""
    rec = partial.record
    if moving(rec):   # stopped while moving the counted segments or before the rename: finish that
        _join_virtual(partial, [(partial.parts / f"part_{k:04d}.h5md", a, b) for k, (a, b) in enumerate(rec["ranges"])])
        return
    with frame_bar(job.n_frames, progress, "convert") as bar:
        if partial.mode is not WriteMode.SEGMENTS:
            partial.say_resumed(int(rec.get("done", 0)), job.n_frames)
            bar.update(int(rec.get("done", 0)))
            write_range(job, 0, job.n_frames, str(partial.tmp), str(partial.record_path), sources, bar)
            check_complete(partial.tmp, job.n_frames, partial.final)
            partial.finish()
            return
        partial.parts.mkdir(exist_ok=True)
        segs = [(partial.parts / f"part_{k:04d}.h5md", a, b) for k, (a, b) in enumerate(rec["ranges"])]
        # The layout's chunk frames fixed for every segment: a short segment would otherwise get
        # smaller chunks than the output, whose stored chunks could then not be copied as they are.
        cf = chunk_frames(job)
        seg_job = dataclasses.replace(job, layout=dataclasses.replace(job.layout, chunks=cf)) \
            if job.layout.chunks not in ("contiguous", "h5py") else job
        tasks = []
        for path, a, b in segs:
            rpath = _seg_record(path)
            done = int((load_record(rpath) or {}).get("done", -1))
            if done < 0:
                save_record(rpath, {"done": 0})
                done = 0
            bar.update(done)
            if done < b - a:
                tasks.append((seg_job, a, b, str(path), str(rpath)))
        partial.say_resumed(bar.n, job.n_frames, contiguous=False)
        run_tasks(write_range, tasks, executor, n_workers, on_done=lambda i, n: bar.update(n), options=options)
    for path, a, b in segs:
        done = (load_record(_seg_record(path)) or {}).get("done")
        if done != b - a:
            raise OutputError(partial.final, f"segment {path.name}: {done} of {b - a} frames written")
    if rec.get("virtual"):
        _join_virtual(partial, segs)
    else:
        _join_copy(partial, segs, job.n_frames, job.layout.file_kwargs())
        check_complete(partial.tmp, job.n_frames, partial.final)
        partial.finish()


def _seg_record(path: Path) -> Path:
    return path.with_suffix(".progress.json")


def _join_copy(partial: Partial, segs, n_frames: int, file_kwargs: dict | None = None) -> None:
    """Copy every segment into the partial output, a few slabs (or stored chunks) at a time; ``file_kwargs``
    are the output's file-creation options (a remote layout's metadata block)."""
    with h5py.File(segs[0][0], "r") as first, h5py.File(partial.tmp, "w", **(file_kwargs or {})) as dst:
        series = copy_structure(first, dst, lambda dg, name, obj: like(dg, name, obj, n_frames)
                                if is_time_series(obj) else None)
        for path, a, _ in segs:
            with h5py.File(path, "r") as seg:
                for name in series:
                    copy_frames(seg[name], dst[name], a)
    log.debug("joined %d segments into %s", len(segs), partial.tmp)


def moving(record: dict | None) -> bool:
    """True when a ``--virtual`` run was stopped while moving its counted segments to ``NAME.parts/``
    (or after): ``--resume`` finishes the move and writes the output, and reruns nothing."""
    return bool((record or {}).get("moving"))


def move_parts(partial: Partial, segs) -> list[tuple[str, int, int]]:
    """Move finished segments to ``NAME.parts/`` (fsynced); return ``(path, first frame, frames)`` of each.
    The record says ``moving`` first, so ``--resume`` finishes a crash anywhere from here to the rename."""
    folder = parts_folder(partial.final)
    if not moving(partial.record):
        partial.record["moving"] = True   # every segment was counted (write() checked) before this
        partial.save()
        if folder.exists():
            shutil.rmtree(folder)   # the output itself was checked: an old run's parts, or --overwrite
    folder.mkdir(exist_ok=True)
    moved = []
    for path, a, b in segs:
        dest = folder / path.name
        if path.exists():
            _seg_record(path).unlink(missing_ok=True)
            path.replace(dest)
            fsync_path(dest)
        elif not dest.exists():
            raise OutputError(partial.final, f"segment {path.name} is in neither {partial.parts} nor {folder}: "
                                             "start again without --resume")
        moved.append((str(dest), a, b - a))
    fsync_path(folder, directory=True)
    return moved


def _join_virtual(partial: Partial, segs) -> None:
    """Move the segments to ``NAME.parts/`` and write the output as virtual datasets over them."""
    moved = move_parts(partial, segs)
    with h5py.File(moved[0][0], "r") as first, h5py.File(partial.tmp, "w") as dst:
        copy_structure(first, dst, lambda dg, name, obj: virtual_series(dg, name, obj, moved,
                                                                        str(partial.final.parent))
                       if is_time_series(obj) else None)
    check_complete(partial.tmp, moved[-1][1] + moved[-1][2], partial.final)
    partial.finish()


def check_complete(path: Path, n_frames: int, final: Path) -> None:
    """Every time series of ``path`` holds ``n_frames`` frames (read back), else OutputError."""
    with open_h5(path) as f:
        bad = []

        def visit(name, obj):
            if is_time_series(obj) and obj.shape[0] != n_frames:
                bad.append(f"{name} has {obj.shape[0]}")
        f.visititems(visit)
        if not bad and not len(f.get("particles", {})):
            bad.append("no particle group")
    if bad:
        raise OutputError(final, f"incomplete ({'; '.join(bad[:3])}; expected {n_frames} frames): not renamed")


def check_parallel_output(final: Path, inputs: list, write: WriteOptions, *, record: Path,
                          segment_workers: tuple[str, ...], command: str) -> None:
    """The output options ``convert`` and ``rechunk`` share, checked before any work: the executor runs
    conversions (an MPI launcher's on two ranks or more); ``virtual`` needs workers counted as one of
    ``segment_workers``; ``NAME.parts/`` is never an input, and an existing one is replaced only with
    ``overwrite`` or by a ``resume`` whose ``record`` says so.
    """
    traits = check_executor(write.executor, choosers=True) if write.executor is not None else None
    if traits is not None and traits.workers == "launcher" and not write.mpi:
        raise ConfigError(f"--executor {traits.name}: launch with mpiexec -n N trajscale {command} ... "
                          "(two ranks or more)")
    if not write.virtual:
        return
    if traits is None or traits.workers not in segment_workers:
        writers = names(workers=segment_workers, converts=True)
        raise ConfigError("--virtual keeps per-worker segments: it needs --executor "
                          + ", ".join(writers[:-1]) + " or " + writers[-1])
    check_parts_folder(final, inputs)
    if parts_folder(final).exists() and not write.overwrite and not (write.resume and moving(load_record(record))):
        raise OutputError(parts_folder(final), "already exists (use --overwrite to replace it)")
