"""Copy an HDF5 file's structure, and join per-worker segment files into one file.

Hard-linked objects stay one object; aligned compressed chunks are copied as they are stored (no recompression).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import h5py
import numpy as np

from ..h5md.codecs import CODES

SLAB_BYTES = 64 * 1024**2


def copy_attrs(src, dst) -> None:
    """Attributes with their stored types (strings stay fixed- or variable-length as they were)."""
    for k in src.attrs:
        dst.attrs.create(k, src.attrs[k], dtype=src.attrs.get_id(k).dtype)


def copy_structure(src: h5py.File, dst: h5py.File,
                   make_series: Callable[[h5py.Group, str, h5py.Dataset], h5py.Dataset | None]) -> list[str]:
    """Copy ``src`` into ``dst``; ``make_series`` creates the datasets it claims (else None: copied).
    Returns the names of those it created."""
    seen: dict = {}
    series: list[str] = []
    later: list[tuple[h5py.Dataset, h5py.Dataset]] = []   # (source, copy) whose bytes are written last
    copy_attrs(src, dst)

    def walk(sg: h5py.Group, dg: h5py.Group) -> None:
        for name in sorted(sg, key=lambda name: _holds_frames(sg, name)):
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
                copy_attrs(obj, sub)
                seen[obj.id] = sub.name
                walk(obj, sub)
                continue
            ds = make_series(dg, name, obj)
            if ds is not None:
                series.append(ds.name)
            else:
                if name in dg:   # (a series made already may have written a sibling: its codes)
                    pass
                elif _bytes_last(obj):
                    copy_attrs(obj, dg.create_dataset(name, shape=obj.shape, dtype=obj.dtype))
                    later.append((obj, dg[name]))
                else:
                    sg.copy(obj, dg, name=name)
                ds = dg[name]
            seen[obj.id] = ds.name

    walk(src, dst)
    for obj, ds in later:
        ds[...] = obj[...]
    return series


#: Most bytes of a dataset whose copy is written after the rest of the structure (a topology's arrays).
LATER_BYTES = 64 * 1024**2


def _bytes_last(obj: h5py.Dataset) -> bool:
    """A contiguous array (a topology's masses, ...) written after the structure and the series' storage, so
    it does not push the per-atom datasets' headers out of the file's first kilobytes."""
    return obj.ndim >= 1 and obj.id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS \
        and obj.id.get_storage_size() <= LATER_BYTES


def _holds_frames(group: h5py.Group, name: str) -> bool:
    """True for an element group of per-atom frames: copied after its siblings, since its storage may be
    allocated as it is created and whatever follows lies beyond it."""
    if not isinstance(group.get(name, getlink=True), h5py.HardLink):
        return False
    obj = group[name]
    value = obj.get("value") if isinstance(obj, h5py.Group) else None
    return isinstance(value, h5py.Dataset) and value.ndim == 3


def is_time_series(obj) -> bool:
    """An H5MD time-dependent dataset: ``value``, ``step`` or ``time`` of an element that has a step."""
    name = obj.name.rsplit("/", 1)[-1]
    return isinstance(obj, h5py.Dataset) and name in ("value", "step", "time") and "step" in obj.parent \
        and obj.ndim >= 1


def like(dg: h5py.Group, name: str, model: h5py.Dataset, n_frames: int, attrs_from=None) -> h5py.Dataset:
    """A dataset shaped as ``model`` but ``n_frames`` long, with its exact creation properties
    (chunks, filters, fill, allocation time) and the attributes of ``attrs_from`` (default ``model``)."""
    shape = (n_frames, *model.shape[1:])
    maxshape = tuple(h5py.h5s.UNLIMITED if m is None else m for m in model.maxshape) if model.chunks else shape
    space = h5py.h5s.create_simple(shape, maxshape)
    dsid = h5py.h5d.create(dg.id, name.encode(), model.id.get_type(), space, dcpl=model.id.get_create_plist())
    ds = h5py.Dataset(dsid)
    copy_attrs(attrs_from if attrs_from is not None else model, ds)
    return ds


def copy_frames(sds: h5py.Dataset, dds: h5py.Dataset, at: int, slab_bytes: int = SLAB_BYTES) -> None:
    """Copy all frames of ``sds`` into ``dds[at:at + len(sds)]``, a few slabs at a time."""
    n = sds.shape[0]
    if n == 0:
        return
    if _same_stored_chunks(sds, dds, at):
        cf = sds.chunks[0]
        for i in range(0, n, cf):   # one call per stored chunk (MiBs each): the bytes as they are
            mask, data = sds.id.read_direct_chunk((i,) + (0,) * (sds.ndim - 1))
            dds.id.write_direct_chunk((at + i,) + (0,) * (sds.ndim - 1), data, mask)
        return
    frame = max(1, int(np.prod(sds.shape[1:])) * sds.dtype.itemsize)
    cf = dds.chunks[0] if dds.chunks else 1
    per = max(cf, slab_bytes // frame // cf * cf)
    buf = np.empty((min(per, n), *sds.shape[1:]), sds.dtype)
    for a in range(0, n, per):
        b = min(n, a + per)
        sds.read_direct(buf, np.s_[a:b], np.s_[0:b - a])
        dds.write_direct(buf, np.s_[0:b - a], np.s_[at + a:at + b])


def _same_stored_chunks(sds: h5py.Dataset, dds: h5py.Dataset, at: int) -> bool:
    """True when ``sds``'s compressed chunks are ``dds``'s chunks as stored (same shape, filters, alignment)."""
    if not (sds.chunks and dds.chunks and sds.chunks == dds.chunks and at % sds.chunks[0] == 0):
        return False
    if sds.chunks[1:] != sds.shape[1:]:   # a chunk splits a frame: keep it simple
        return False
    a, b = sds.id.get_create_plist(), dds.id.get_create_plist()
    filters = [a.get_filter(i)[:3] for i in range(a.get_nfilters())]
    return bool(filters) and filters == [b.get_filter(i)[:3] for i in range(b.get_nfilters())] \
        and sds.dtype == dds.dtype


def virtual_series(dg: h5py.Group, name: str, model: h5py.Dataset, segments: list[tuple[str, int, int]],
                   main_dir: str, attrs_from=None) -> h5py.Dataset:
    """A virtual dataset concatenating dataset ``model.name`` of each ``(file, start, n)`` segment."""
    total = sum(n for _, _, n in segments)
    shape = (total, *model.shape[1:])
    layout = h5py.VirtualLayout(shape=shape, dtype=model.dtype)
    for path, start, n in segments:
        if n:
            rel = os.path.relpath(path, main_dir)
            layout[start:start + n] = h5py.VirtualSource(rel, model.name, shape=(n, *model.shape[1:]))
    ds = dg.create_virtual_dataset(name, layout, fillvalue=None)
    copy_attrs(attrs_from if attrs_from is not None else model, ds)
    # delta-coded segments share one plan (h5md.codecs): the output keeps theirs, not its input's
    if CODES in dg:
        del dg[CODES]
    if CODES in model.parent:
        model.parent.copy(CODES, dg)
    return ds
