"""Rewrite an H5MD (or any HDF5) file with a new layout, keeping every dataset, attribute and link.

The per-atom time series (``particles/*/{position,velocity,force}/value``) are
copied in slabs into datasets with the new chunks and compression (and, with
``precision``, rounded to it first); everything else is copied as it is, and
objects that were hard-linked under several names (H5MD's shared step/time)
stay one object.

Resumable: the output is written under ``.NAME.rechunk-partial`` beside a
progress record (``.NAME.rechunk-progress.json``: frames done per dataset,
the input's identity and the layout). An interrupted run leaves both; ``resume``
continues from the record; the rename to ``NAME`` happens only when every frame
of every dataset is written and its count checked.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from ..errors import ConfigError, InputFileError, OutputError, UnitError
from ..store.codecs import (ENCODINGS, decode_deltas, delta_quantum, encode_deltas, lossy_attrs,
                            lossy_attrs_for, quantize)
from ..store.hdf5 import ensure_filters, open_h5
from ..store.layout import Layout
from ..store.schema import attr_str
from ..store.units import factor
from ..util import check_output_path, polling_for_stop, raise_if_stopped

log = logging.getLogger(__name__)

#: Bytes copied per slab (and between progress records); TRAJSCALE_RECHUNK_SLAB_MB overrides.
SLAB_BYTES = int(float(os.environ.get("TRAJSCALE_RECHUNK_SLAB_MB", 64)) * 1024**2)
PER_ATOM = ("position", "velocity", "force")


@dataclass(frozen=True)
class RechunkSummary:
    output: str
    n_frames: int
    datasets: int
    bytes_in: int
    bytes_out: int
    seconds: float
    resumed_from: int


def partial_paths(output: str | os.PathLike) -> tuple[Path, Path]:
    """The temporary output and the progress record of ``output``."""
    p = Path(output)
    return p.with_name(f".{p.name}.rechunk-partial"), p.with_name(f".{p.name}.rechunk-progress.json")


def _identity(path: str) -> dict:
    st = os.stat(path)
    return {"input": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _is_series(name: str, obj) -> bool:
    parts = name.strip("/").split("/")
    return (isinstance(obj, h5py.Dataset) and len(parts) == 4 and parts[0] == "particles"
            and parts[2] in PER_ATOM and parts[3] == "value" and obj.ndim == 3 and obj.shape[2] == 3)


def rechunk(input: str | os.PathLike, output: str | os.PathLike, layout: Layout, *,
            precision: float | None = None, encoding: str = "floats", overwrite: bool = False,
            resume: bool = False, slab_bytes: int | None = None, progress: bool = False) -> RechunkSummary:
    """Copy ``input`` to ``output`` with ``layout`` for its per-atom time series.

    Parameters
    ----------
    precision
        Round positions to this precision in Å first (lossy, XTC-like; 0.01 Å = XTC's 0.001 nm):
        values keep float32 with the mantissa bits below a power-of-two quantum <= ``precision``
        zeroed, so any HDF5 reader gets plain floats and a lossless filter compresses them.
    encoding
        With ``precision``: ``"floats"`` (above) or ``"deltas"`` (XTC-sized; only trajscale
        reads it back, see :mod:`trajscale.store.codecs`).
    resume
        Continue an interrupted run of the same input and layout from its progress record.
    """
    t0 = time.perf_counter()
    slab_bytes = slab_bytes or SLAB_BYTES
    src_path = str(input)
    final = check_output_path(output, overwrite=overwrite)
    tmp, record_path = partial_paths(final)
    if encoding not in ENCODINGS:
        raise ConfigError(f"--encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    if encoding == "deltas" and (precision is None or not layout.compression):
        raise ConfigError("--encoding deltas needs --precision and a --compression (zstd or blosc-zstd pay most)")
    wanted = {**_identity(src_path), "layout": layout.describe(), "precision": precision}
    if encoding != "floats":
        wanted["encoding"] = encoding
    record = _load_record(record_path) if resume else None
    if resume and (record is None or not tmp.exists()):
        raise OutputError(final, "nothing to resume (no partial output and progress record beside it)")
    if record is not None and {k: record.get(k) for k in wanted} != wanted:
        raise OutputError(final, "the partial output was made from another input or layout; start again "
                                 "without --resume")
    with open_h5(src_path) as src, polling_for_stop():
        if record is None:
            record = {**wanted, "done": {}}
            with h5py.File(tmp, "w") as dst:
                series = _copy_structure(src, dst, layout, precision, encoding)
            record["done"] = {name: 0 for name in series}
            _save_record(record_path, record)
        resumed = min(record["done"].values(), default=0)
        with h5py.File(tmp, "r+") as dst:
            for name in record["done"]:
                _copy_series(src[name], dst[name], record, record_path, name, precision, slab_bytes, progress)
            for name, done in record["done"].items():   # every frame, counted, before the rename
                if done != src[name].shape[0] or dst[name].shape != src[name].shape:
                    raise OutputError(final, f"{name}: {done} of {src[name].shape[0]} frames written")
        n_frames = max((src[n].shape[0] for n in record["done"]), default=0)
        bytes_in = os.path.getsize(src_path)
    _fsync(tmp)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    record_path.unlink(missing_ok=True)
    log.info("rechunked %s -> %s (%s)", src_path, final, layout.describe())
    return RechunkSummary(str(final), n_frames, len(record["done"]), bytes_in, os.path.getsize(final),
                          time.perf_counter() - t0, resumed)


def _copy_structure(src: h5py.File, dst: h5py.File, layout: Layout, precision: float | None,
                    encoding: str = "floats") -> list[str]:
    """Everything but the series' values (created empty with the new layout); return the series' names."""
    seen: dict = {}
    series: list[str] = []
    _copy_attrs(src, dst)

    def walk(sg: h5py.Group, dg: h5py.Group) -> None:
        for name in sg:
            link = sg.get(name, getlink=True)
            if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
                dg[name] = link
                continue
            obj = sg[name]
            if obj.id in seen:          # a hard link to an object already copied
                dg[name] = dst[seen[obj.id]]
                continue
            if isinstance(obj, h5py.Group):
                sub = dg.create_group(name)
                _copy_attrs(obj, sub)
                seen[obj.id] = sub.name
                walk(obj, sub)
            elif _is_series(obj.name, obj):
                ds = _create_series(dg, name, obj, layout, precision, encoding)
                seen[obj.id] = ds.name
                series.append(ds.name)
            else:
                sg.copy(obj, dg, name=name)
                seen[obj.id] = dg[name].name

    walk(src, dst)
    return series


def _create_series(dg: h5py.Group, name: str, obj: h5py.Dataset, layout: Layout, precision: float | None,
                   encoding: str = "floats"):
    n_frames, n_atoms, _ = obj.shape
    lossy = precision is not None and obj.name.split("/")[-2] == "position"
    deltas = lossy and encoding == "deltas"
    dtype = np.uint32 if deltas else np.float32 if delta_quantum(obj) else obj.dtype
    chunks = layout.chunk_shape(n_atoms, np.dtype(dtype).itemsize, n_frames)
    kw = {"shape": obj.shape, "dtype": dtype}
    if chunks is not None:
        if chunks is not True:   # True: h5py's own guess (kept to reproduce slow files)
            chunks = tuple(min(c, s) for c, s in zip(chunks, obj.shape)) if n_frames else None
        kw.update(chunks=chunks, maxshape=(None, n_atoms, 3), **layout.h5py_kwargs())
    ds = dg.create_dataset(name, **kw)
    _copy_attrs(obj, ds)
    if "trajscale_unit" in ds.attrs:   # a delta-coded input: written back as floats (or re-coded below)
        ds.attrs["unit"] = ds.attrs["trajscale_unit"]
        del ds.attrs["trajscale_unit"]
        ds.attrs["trajscale_encoding"] = "floats"
    if lossy:
        ds.attrs.update(lossy_attrs_for(precision, encoding, attr_str(ds, "unit"), _length_scale(obj)))
    return ds


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
                 precision: float | None, slab_bytes: int, progress: bool) -> None:
    n_frames, n_atoms, _ = sds.shape
    ensure_filters(sds)
    done = record["done"][name]
    if done >= n_frames:
        return
    cf = dds.chunks[0] if dds.chunks else 1
    per = max(cf, (slab_bytes // max(1, n_atoms * 3 * sds.dtype.itemsize)) // cf * cf)
    q_in, q_out = delta_quantum(sds), delta_quantum(dds)
    lossy = lossy_attrs(dds)
    q = lossy[1] if lossy and lossy[2] == "floats" else None   # (idempotent on quantized input)
    buf = np.empty((per, n_atoms, 3), sds.dtype)
    from tqdm import tqdm

    with tqdm(total=n_frames, initial=done, desc=name, unit="frame", disable=not progress, leave=False) as bar:
        a = done
        while a < n_frames:
            raise_if_stopped()
            b = min(n_frames, a + per)
            sds.read_direct(buf, np.s_[a:b], np.s_[0:b - a])
            out = buf[:b - a] if q_in is None else decode_deltas(buf[:b - a], q_in)
            if q_out is not None:
                try:
                    out = encode_deltas(out, q_out) if q_in != q_out else buf[:b - a]
                except ValueError as exc:
                    raise InputFileError(sds.file.filename, f"{sds.name} frames {a}-{b}: {exc}") from None
            elif q is not None:
                out = quantize(out, float(q))
            dds.write_direct(np.ascontiguousarray(out), dest_sel=np.s_[a:b])
            dds.file.flush()   # the frames are on disk before the record says so
            record["done"][name] = a = b
            _save_record(record_path, record)
            bar.update(b - bar.n)


def _load_record(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _save_record(path: Path, record: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(record, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _copy_attrs(src, dst) -> None:
    """Attributes with their stored types (strings stay fixed- or variable-length as they were)."""
    for k in src.attrs:
        dst.attrs.create(k, src.attrs[k], dtype=src.attrs.get_id(k).dtype)


def _fsync(path: Path) -> None:
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
