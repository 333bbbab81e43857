"""Rewrite an H5MD (or any HDF5) file with a new layout, keeping every dataset, attribute and link.

The per-atom time series (``particles/*/{position,velocity,force}/value``) are
copied in slabs into datasets with the new chunks and compression (and, with
``precision``, rounded to it first); everything else is copied as it is, and
objects that were hard-linked under several names (H5MD's shared step/time)
stay one object.

Resumable (``convert.resume``): the output is written under
``.NAME.rechunk-partial`` beside a progress record
(``.NAME.rechunk-progress.json``: frames done per dataset, the input's identity
and the layout). An interrupted run leaves both; ``resume`` continues from the
record; the rename to ``NAME`` happens only when every frame of every dataset
is written and its count checked.

Uncompressed outputs (no filter, no precision), serial or on processes/Dask:
the partial output is created with the whole structure and its series'
storage allocated, and each worker (or the one serial pass) copies its range
of frames to their byte addresses (:func:`rechunk_range_direct`,
``convert.direct``): whole frames read through HDF5 a few MiB at a time,
nothing joined afterwards.

Otherwise, in parallel (``executor="processes"|"dask"``, MPI, ``virtual``): each
worker rewrites its range of frames into a segment file with its own record
(:func:`rechunk_range`); the segments are then copied into the output or kept
as virtual datasets, as ``convert``'s are (``convert.segmented``).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from ..block import split_frames
from ..errors import ConfigError, InputFileError, OutputError, UnitError
from ..progress import progress_bar
from ..store.codecs import (
    CODES,
    Deltas,
    check_lossy_options,
    codec_for,
    deltas_of,
    is_delta_coded,
    lossy_attrs_for,
    stored_dtype,
)
from ..store.direct_write import DirectWrites
from ..store.hdf5 import ensure_filters, open_h5
from ..store.layout import Layout
from ..store.schema import attr_str
from ..store.units import factor
from ..store.writer import early_allocation
from ..util import check_output_path, polling_for_stop, raise_if_stopped
from . import direct
from .join import copy_attrs, copy_frames, copy_structure, virtual_series
from .pool import frame_bar, on_root, run_tasks
from .recode import recoder
from .resume import Partial, identity, load_record, save_record
from .resume import partial_paths as resume_paths
from .segmented import check_parallel_output, move_parts, moving

log = logging.getLogger(__name__)

#: Bytes copied per slab (and between progress records); TRAJSCALE_RECHUNK_SLAB_MB overrides.
SLAB_BYTES = int(float(os.environ.get("TRAJSCALE_RECHUNK_SLAB_MB", 64)) * 1024**2)
PER_ATOM = ("position", "velocity", "force")
#: Bytes an in-place rechunk copies per read and write (its slabs are counted SLAB_BYTES at a time).
COPY_BYTES = 4 * 1024**2


@dataclass(frozen=True)
class RechunkSummary:
    """What :func:`rechunk` wrote: frames, datasets, bytes in and out, seconds, and the frame it resumed from."""

    output: str
    n_frames: int
    datasets: int
    bytes_in: int
    bytes_out: int
    seconds: float
    resumed_from: int


def partial_paths(output: str | os.PathLike) -> tuple[Path, Path]:
    """The temporary output and the progress record of ``output``."""
    return resume_paths(output, "rechunk")


def _is_series(name: str, obj) -> bool:
    parts = name.strip("/").split("/")
    return (isinstance(obj, h5py.Dataset) and len(parts) == 4 and parts[0] == "particles"
            and parts[2] in PER_ATOM and parts[3] == "value" and obj.ndim == 3 and obj.shape[2] == 3)


def rechunk(input: str | os.PathLike, output: str | os.PathLike, layout: Layout, *,
            precision: float | None = None, encoding: str = "floats", overwrite: bool = False,
            resume: bool = False, slab_bytes: int | None = None, progress: bool = False,
            executor: str | None = None, n_workers: int | None = None, virtual: bool = False,
            comm=None) -> RechunkSummary:
    """Copy ``input`` to ``output`` with ``layout`` for its per-atom time series.

    Parameters
    ----------
    precision
        Round positions to this precision in Å first (lossy, XTC-like; 0.01 Å = XTC's 0.001 nm):
        values keep float32 with the mantissa bits below a power-of-two quantum <= ``precision``
        zeroed, so any HDF5 reader gets plain floats and a lossless filter compresses them.
    encoding
        With ``precision``: ``"floats"`` (above), ``"deltas"`` (XTC-sized, coordinates within
        32767 steps of the first frame's centre) or ``"deltas32"`` (no such bound); only
        trajscale reads deltas back, see :mod:`trajscale.store.codecs`.
    resume
        Continue an interrupted run of the same input and layout from its progress record.
    executor, n_workers
        ``"processes"`` or ``"dask"``: each of ``n_workers`` workers rewrites its range of frames
        into a segment file; the segments are then copied into the output (stored chunks as they
        are) or, with ``virtual``, kept in ``NAME.parts/`` and mapped into it as virtual datasets.
        ``"mpi"`` with ``comm`` (every rank calls this): every rank writes its slabs into the one
        output through parallel HDF5, rank 0 keeps the progress record and renames it
        (``convert.rechunk_mpi``); with ``virtual`` each rank rewrites its own segment.
    """
    t0 = time.perf_counter()
    # written in place, frames are counted (after an fdatasync) every direct.COUNT_BYTES unless the
    # caller asks for slabs: a sync every 64 MiB slab kept the copy waiting on the disk
    count_bytes = slab_bytes or direct.COUNT_BYTES
    slab_bytes = slab_bytes or SLAB_BYTES
    src_path = str(input)
    final = check_output_path(output, overwrite=overwrite, inputs=[input])   # never the input, even with overwrite
    check_parallel_output(final, [input], executor=executor, virtual=virtual, overwrite=overwrite, resume=resume,
                          record=partial_paths(final)[1], segment_writers=("processes", "dask", "mpi"))
    mpi = executor == "mpi"
    if mpi and (comm is None or comm.Get_size() < 2):
        raise ConfigError("--executor mpi: launch with mpiexec -n N trajscale rechunk ... (two ranks or more)")
    check_lossy_options(precision, encoding, layout.compression, warn=comm is None or comm.Get_rank() == 0)
    (ident,) = identity([src_path])
    wanted = {**ident, "layout": layout.describe(), "precision": precision}
    if encoding != "floats":
        wanted["encoding"] = encoding
    partial = Partial(final, "rechunk", wanted)
    with open_h5(src_path) as src, polling_for_stop():
        names = _series_names(src)
        n_frames = max((src[n].shape[0] for n in names), default=0)
        n_workers = comm.Get_size() if mpi else n_workers or os.cpu_count() or 1
        parallel = executor in ("processes", "dask")
        if mpi and not virtual:   # one file, written by every rank through parallel HDF5
            from .rechunk_mpi import rechunk_collective  # (and parallel HDF5's writer) only under MPI

            resumed_from = rechunk_collective(
                comm, src_path, names, partial, layout, precision, encoding, slab_bytes, resume,
                create=lambda dst: _copy_structure(src, dst, layout, precision, encoding))
            on_root(comm, lambda: (_check_counts(src, partial, names), partial.finish()))
            return RechunkSummary(str(final), n_frames, len(names), os.path.getsize(src_path),
                                  os.path.getsize(final), time.perf_counter() - t0, resumed_from)
        if not mpi and not virtual and _direct_eligible(src, names, layout, precision, encoding):
            # no filter on the output: every worker (or the one serial pass) writes its frames in place
            cf = max(_chunk_frames(src[n], layout) for n in names)
            fresh = direct.plan(n_frames, n_workers if parallel else 1, cf)
        elif executor in ("processes", "dask", "mpi"):
            cf = max([_chunk_frames(src[n], layout) for n in names], default=1)
            ranges = split_frames(n_frames, n_workers, align=cf)
            fresh = {"mode": "segments", "virtual": bool(virtual), "ranges": [[r.start, r.stop] for r in ranges]}
        else:
            fresh = {"done": {}}
        if mpi:   # rank 0 keeps the record and joins; every rank rewrites its segments
            partial.record = on_root(comm, lambda: _begin_on_root(partial, resume, fresh))
        else:
            # serially, the record is first written with the output's structure (frames counted from there)
            resumed = partial.begin(resume, fresh, save=fresh.get("mode") == "segments")
        record = partial.record
        if record.get("mode") == "direct":
            resumed_from = _run_direct(src_path, src, names, partial, layout, count_bytes, executor or "serial",
                                       n_workers, progress)
        elif record.get("mode") == "segments":
            resumed_from = n_frames if moving(record) else _run_segments(
                src_path, src, names, partial, layout, precision, encoding, slab_bytes, executor or "serial",
                n_workers, comm=comm if mpi else None)

            def join():
                if record.get("virtual"):
                    return _finish_virtual(src, partial, names, t0, resumed_from)
                with h5py.File(partial.tmp, "w") as dst:
                    _copy_structure(src, dst, layout, precision, encoding)
                    for path, a, _ in _segments(partial):
                        with h5py.File(path, "r") as seg:
                            for name in names:
                                copy_frames(seg[name], dst[name], a, slab_bytes)
                _check_counts(src, partial, names)
                partial.finish()
                log.info("rechunked %s -> %s (%s)", src_path, final, layout.describe())
                return RechunkSummary(str(final), n_frames, len(names), os.path.getsize(src_path),
                                      os.path.getsize(final), time.perf_counter() - t0, resumed_from)
            return on_root(comm, join) if mpi else join()
        else:
            if not resumed or not partial.tmp.exists():
                with h5py.File(partial.tmp, "w") as dst:
                    series = _copy_structure(src, dst, layout, precision, encoding)
                record["done"] = {name: 0 for name in series}
                partial.save()
            resumed_from = min(record["done"].values(), default=0)
            with h5py.File(partial.tmp, "r+") as dst:
                for name in record["done"]:
                    _copy_series(src[name], dst[name], record, partial.record_path, name, precision,
                                 slab_bytes, progress)
            for name, done in record["done"].items():   # every frame, counted, before the rename
                if done != src[name].shape[0]:
                    raise OutputError(final, f"{name}: {done} of {src[name].shape[0]} frames written")
        _check_counts(src, partial, names)
        bytes_in = os.path.getsize(src_path)
    partial.finish()
    log.info("rechunked %s -> %s (%s)", src_path, final, layout.describe())
    return RechunkSummary(str(final), n_frames, len(names), bytes_in, os.path.getsize(final),
                          time.perf_counter() - t0, resumed_from)


def _direct_eligible(src: h5py.File, names: list[str], layout: Layout, precision, encoding: str) -> bool:
    """Outputs with no filter, from inputs whose series are stored as plain numbers of every frame."""
    return bool(names) and encoding == "floats" and direct.eligible(layout, precision) and all(
        src[n].shape[0] and src[n].dtype.isnative and src[n].dtype.kind == "f" and not is_delta_coded(src[n])
        for n in names)


def _run_direct(src_path: str, src: h5py.File, names: list[str], partial: Partial, layout: Layout,
                count_bytes: int, executor: str, n_workers: int, progress: bool) -> int:
    """Create the partial output (allocated, structure copied), then write every range's frames in place;
    return the frames counted before this run."""
    def create(path: Path) -> list[str]:
        with h5py.File(path, "w") as dst:
            _copy_structure(src, dst, layout, None, early=True)
        return names

    targets = direct.prepare(partial, create)
    before = sum(int((load_record(partial.worker_record(k)) or {}).get("done", 0))
                 for k in range(len(partial.record["ranges"])))
    with frame_bar(partial.record["ranges"][-1][1], progress, "rechunk") as bar:
        direct.run_ranges(partial, rechunk_range_direct, (src_path, names, count_bytes, targets), executor,
                          n_workers, bar)
    return before


def rechunk_range_direct(src_path: str, names: list[str], count_bytes: int, targets: dict, a: int, b: int,
                         path: str, record_path: str) -> int:
    """Worker: copy frames ``[a, b)`` of the series ``names`` to their addresses in ``path``, resumably.

    Whole frames are read through HDF5, one call per piece of a few MiB (a piece of whole frames is one
    run: there is no gather for the reader's byte-address path to save); every ``count_bytes`` of frames are
    fdatasynced before the record counts them.
    """
    record = load_record(Path(record_path)) or {}
    done = int(record.get("done", 0))
    if done >= b - a:
        return 0
    with open_h5(src_path) as src, DirectWrites(path, targets) as dw, polling_for_stop():
        series = [src[n] for n in names]
        for ds in series:
            ensure_filters(ds)
        frame_bytes = max(1, sum(ds.shape[1] * 3 * ds.dtype.itemsize for ds in series))
        per = max(1, min(b - a, count_bytes // frame_bytes))   # frames counted at a time
        # copied a few MiB at a time: the buffer stays in cache between the read and the write
        piece = max(1, min(per, COPY_BYTES // frame_bytes))
        bufs = [np.empty((piece, ds.shape[1], 3), ds.dtype) for ds in series]
        at = a + done
        while at < b:
            raise_if_stopped()
            end = min(b, at + per)
            for p0 in range(at, end, piece):
                p1 = min(end, p0 + piece)
                for ds, buf in zip(series, bufs, strict=False):
                    hi = min(p1, ds.shape[0])
                    if hi <= p0:
                        continue
                    out = buf[:hi - p0]
                    ds.read_direct(out, np.s_[p0:hi], np.s_[0:hi - p0])
                    dw.write(ds.name, p0, out)
            dw.sync()   # on disk before the record counts it
            at = end
            record["done"] = at - a
            save_record(Path(record_path), record)
    return b - a - done


def _begin_on_root(partial: Partial, resume: bool, fresh: dict) -> dict:
    """Rank 0 of an MPI rechunk: load or start the record (and the segments' folder)."""
    partial.begin(resume, fresh)
    if partial.record.get("mode") != "segments":
        raise OutputError(partial.final, "the partial output was written serially; resume it without mpiexec, "
                                         "or start again without --resume")
    partial.parts.mkdir(exist_ok=True)
    return partial.record


def _series_names(src: h5py.File) -> list[str]:
    names: list[str] = []
    src.visititems(lambda name, obj: names.append(obj.name) if _is_series(obj.name, obj) else None)
    return names


def _chunk_frames(ds: h5py.Dataset, layout: Layout) -> int:
    shape = layout.chunk_shape(ds.shape[1], ds.dtype.itemsize, ds.shape[0])
    return shape[0] if isinstance(shape, tuple) else 1


def _check_counts(src: h5py.File, partial: Partial, names: list[str]) -> None:
    """Every series of the partial output has the input's shape (read back), else OutputError."""
    with open_h5(partial.tmp) as out:
        for name in names:
            if out[name].shape != src[name].shape:
                raise OutputError(partial.final, f"{name}: {out[name].shape[0]} of {src[name].shape[0]} "
                                                 "frames written")


def _segments(partial: Partial) -> list[tuple[Path, int, int]]:
    return [(partial.parts / f"part_{k:04d}.h5md", a, b) for k, (a, b) in enumerate(partial.record["ranges"])]


def _run_segments(src_path: str, src: h5py.File, names: list[str], partial: Partial, layout: Layout,
                  precision, encoding: str, slab_bytes: int, executor: str, n_workers: int, comm=None) -> int:
    """Rewrite every segment's frames on the workers (each its own file and record); return frames
    already done before this run.  Under MPI (``comm``) every rank runs its share of rank 0's tasks."""
    partial.parts.mkdir(exist_ok=True)
    tasks, before = [], 0
    for path, a, b in _segments(partial):
        rpath = path.with_suffix(".progress.json")
        done = (load_record(rpath) or {}).get("done")
        if done:
            before += min(done.values())
        if not done or min(done.values()) < b - a:
            tasks.append((src_path, str(path), str(rpath), names, layout, precision, encoding, a, b, slab_bytes))
    if comm is not None:   # one task list: a rank may start writing records before another has read them
        tasks, before = comm.bcast((tasks, before), root=0)
    run_tasks(rechunk_range, tasks, executor, n_workers, comm=comm)
    for path, a, b in _segments(partial):
        done = (load_record(path.with_suffix(".progress.json")) or {}).get("done") or {}
        if sorted(done) != sorted(names) or any(v != b - a for v in done.values()):
            raise OutputError(partial.final, f"segment {path.name}: not every frame written")
    return before


def rechunk_range(src_path: str, path: str, record_path: str, names: list[str], layout: Layout, precision,
                  encoding: str, a: int, b: int, slab_bytes: int) -> int:
    """Worker: rewrite frames ``[a, b)`` of the series ``names`` into segment file ``path``, resumably."""
    record = load_record(Path(record_path)) or {}
    with open_h5(src_path) as src, polling_for_stop():
        if not record.get("done") or not Path(path).exists():
            with h5py.File(path, "w") as dst:
                for name in names:
                    group, _, leaf = name.rpartition("/")
                    _create_series(dst.require_group(group), leaf, src[name], layout, precision, encoding,
                                   n_frames=b - a)
            record = {"done": {name: 0 for name in names}}
            save_record(Path(record_path), record)
        with h5py.File(path, "r+") as dst:
            for name in names:
                _copy_series(src[name], dst[name], record, Path(record_path), name, precision, slab_bytes,
                             False, first=a)
    return b - a


def _finish_virtual(src: h5py.File, partial: Partial, names: list[str], t0: float, resumed_from: int):
    """Move the segments to ``NAME.parts/`` and write the output with virtual series over them."""
    final = partial.final
    moved = move_parts(partial, _segments(partial))
    with h5py.File(moved[0][0], "r") as first, h5py.File(partial.tmp, "w") as dst:
        copy_structure(src, dst, lambda dg, name, obj: virtual_series(dg, name, first[obj.name], moved,
                                                                      str(final.parent))
                       if _is_series(obj.name, obj) else None)
    _check_counts(src, partial, names)
    bytes_in = os.path.getsize(src.filename)
    partial.finish()
    return RechunkSummary(str(final), max((src[n].shape[0] for n in names), default=0), len(names), bytes_in,
                          os.path.getsize(final), time.perf_counter() - t0, resumed_from)


def _copy_structure(src: h5py.File, dst: h5py.File, layout: Layout, precision: float | None,
                    encoding: str = "floats", early: bool = False) -> list[str]:
    """Everything but the series' values (created empty with the new layout; ``early``: their storage
    allocated now); return the series' names."""
    return copy_structure(src, dst, lambda dg, name, obj: _create_series(dg, name, obj, layout, precision, encoding,
                                                                         early=early)
                          if _is_series(obj.name, obj) else None)


def _create_series(dg: h5py.Group, name: str, obj: h5py.Dataset, layout: Layout, precision: float | None,
                   encoding: str = "floats", n_frames: int | None = None, early: bool = False):
    n_total, n_atoms, _ = obj.shape
    n_frames = n_total if n_frames is None else n_frames
    lossy = precision is not None and obj.name.split("/")[-2] == "position"
    attrs = lossy_attrs_for(precision, encoding, attr_str(obj, "trajscale_unit") or attr_str(obj, "unit") or "",
                            _length_scale(obj)) if lossy else None
    dtype = stored_dtype(attrs) if lossy else np.float32 if is_delta_coded(obj) else obj.dtype
    # chunk frames planned for the whole series, so a segment's chunks are the output's
    chunks = layout.chunk_shape(n_atoms, np.dtype(dtype).itemsize, n_total)
    kw = {"shape": (n_frames, n_atoms, 3), "dtype": dtype}
    if chunks is not None:
        if chunks is not True:   # True: h5py's own guess (kept to reproduce slow files)
            chunks = (tuple(min(c, s) for c, s in zip(chunks, (n_frames, n_atoms, 3), strict=False))
                      if n_frames else None)
        kw.update(chunks=chunks, maxshape=(None, n_atoms, 3), **layout.h5py_kwargs())
    if early:   # every chunk gets its address now (store.direct_write)
        kw["dcpl"] = early_allocation()
    ds = dg.create_dataset(name, **kw)
    copy_attrs(obj, ds)
    if "trajscale_unit" in ds.attrs:   # a delta-coded input: written back as floats (or re-coded below)
        ds.attrs["unit"] = ds.attrs["trajscale_unit"]
        del ds.attrs["trajscale_unit"]
        ds.attrs["trajscale_encoding"] = "floats"
    if "trajscale_center" in ds.attrs:   # the input's centre, copied with its attributes
        del ds.attrs["trajscale_center"]
    if CODES in dg:      # the input's codes, copied with its element group
        del dg[CODES]
    if lossy:
        ds.attrs.update(attrs)
        # every worker plans from the input's first frame, so their segments agree
        codec = codec_for(attrs, _first_frame(obj) if attrs["trajscale_encoding"] != "floats" else None)
        if isinstance(codec, Deltas):
            codec.store(ds)
    return ds


def _first_frame(ds: h5py.Dataset) -> np.ndarray:
    """Frame 0 of a position series, in its unit."""
    ensure_filters(ds)
    codec = deltas_of(ds)
    raw = ds[:1]
    return (raw if codec is None else codec.decode(raw))[0]


def _length_scale(ds: h5py.Dataset) -> float:
    """Å per unit of ``ds``; --precision is in Å and a file's unit is never guessed."""
    unit = attr_str(ds, "trajscale_unit") or attr_str(ds, "unit")
    if unit is None:
        raise InputFileError(ds.file.filename, f"{ds.name} has no unit attribute: --precision is in Å "
                                               "and trajscale never guesses a file's length unit")
    try:
        return factor("position", unit)
    except UnitError as exc:
        raise InputFileError(ds.file.filename, f"{ds.name} has an {exc}") from None


def _copy_series(sds: h5py.Dataset, dds: h5py.Dataset, record: dict, record_path: Path, name: str,
                 precision: float | None, slab_bytes: int, progress: bool, first: int = 0) -> None:
    """Copy ``sds[first:first + len(dds)]`` into ``dds`` from the frame the record counts, slab by slab."""
    n_frames, n_atoms, _ = dds.shape
    ensure_filters(sds)
    done = record["done"][name]
    if done >= n_frames:
        return
    cf = dds.chunks[0] if dds.chunks else 1
    per = max(cf, (slab_bytes // max(1, n_atoms * 3 * sds.dtype.itemsize)) // cf * cf)
    recode = recoder(sds, dds)
    buf = np.empty((per, n_atoms, 3), sds.dtype)
    with progress_bar(n_frames, progress, desc=name, unit="frame", initial=done) as bar:
        a = done
        while a < n_frames:
            raise_if_stopped()
            b = min(n_frames, a + per)
            sds.read_direct(buf, np.s_[first + a:first + b], np.s_[0:b - a])
            dds.write_direct(recode(buf[:b - a], first + a), dest_sel=np.s_[a:b])
            dds.file.flush()   # the frames are on disk before the record says so
            record["done"][name] = a = b
            save_record(record_path, record)
            bar.update(b - bar.n)
