"""Blosc chunks decompressed straight into the decoder's buffer (hdf5.blosc, through the chunk reader): the
same values HDF5 gives."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from trajscale.convert.rechunk import rechunk
from trajscale.h5md.layout import Layout
from trajscale.hdf5 import blosc
from trajscale.hdf5.blosc import blosc_decompressor
from trajscale.hdf5.chunks import ChunkIndex, ChunkReads
from trajscale.sources import open_source
from trajscale.storage.bytestore import LocalFile

hdf5plugin = pytest.importorskip("hdf5plugin")
POS = "particles/all/position/value"


def _dataset(path, n_frames=11, chunk=4, **filters):
    rng = np.random.default_rng(5)
    data = rng.integers(0, 2**16, (n_frames, 50, 3)).astype(np.uint16)
    data[:, 10:] &= 0xFF   # something to compress
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=data, chunks=(chunk, 50, 3), maxshape=(None, 50, 3), **filters)
    return data


def _reader(f, path) -> ChunkReads:
    return ChunkReads(LocalFile(str(path)), ChunkIndex.of(f["v"], lazy=True), dataset=f["v"])


def test_every_chunk_equals_hdf5s_read_the_last_partial_one_too(tmp_path):
    data = _dataset(tmp_path / "b.h5", **hdf5plugin.Blosc(cname="lz4", shuffle=hdf5plugin.Blosc.SHUFFLE))
    with h5py.File(tmp_path / "b.h5") as f:
        reader = _reader(f, tmp_path / "b.h5")
        assert reader.decodes_in_place
        buf = np.empty((4, 50, 3), np.uint16)
        for k in range(3):
            assert reader.read_chunk(k, buf)
            n = min(4, 11 - 4 * k)
            np.testing.assert_array_equal(buf[:n], data[4 * k:4 * k + n])


def test_other_filters_and_unwritten_chunks_are_left_to_hdf5(tmp_path):
    _dataset(tmp_path / "z.h5", **hdf5plugin.Zstd())
    _dataset(tmp_path / "c.h5", fletcher32=True, **hdf5plugin.Blosc(cname="lz4"))
    for name in ("z.h5", "c.h5"):
        with h5py.File(tmp_path / name) as f:
            assert blosc_decompressor(f["v"]) is None, name
    _dataset(tmp_path / "u.h5", **hdf5plugin.Blosc(cname="lz4"))
    with h5py.File(tmp_path / "u.h5", "r+") as f:
        f["v"].resize(20, axis=0)   # chunks 3 and 4 never written
    with h5py.File(tmp_path / "u.h5", "r") as f:
        reader = _reader(f, tmp_path / "u.h5")
        assert not reader.read_chunk(4, np.empty((4, 50, 3), np.uint16))


def test_the_source_reads_the_same_through_blosc_and_through_hdf5(tmp_path, adk_vacuum_h5md, monkeypatch):
    out = tmp_path / "d.h5md"
    rechunk(adk_vacuum_h5md, out, Layout.parse("7", "blosc-lz4"), precision=0.01, encoding="deltas")
    calls = []
    real = ChunkReads.read_chunk
    monkeypatch.setattr(ChunkReads, "read_chunk", lambda self, k, buf: calls.append(k) or real(self, k, buf))
    atoms = np.array([3000, 2, 17, 17, 900])
    with open_source(str(out)) as src:
        fast = [src.read(0, 98).positions.copy(), src.read(5, 40, atoms).positions.copy(),
                src.read(3, 60, stride=4).positions.copy()]
    assert sorted(set(calls)) == list(range(14))   # every chunk of the stride-1 reads came from Blosc
    monkeypatch.setattr(blosc, "_decompress", lambda: None)
    with open_source(str(out)) as src:
        assert not src._reads["position"].decodes_in_place   # (HDF5's pipeline decodes each chunk)
        slow = [src.read(0, 98).positions, src.read(5, 40, atoms).positions, src.read(3, 60, stride=4).positions]
        src._reads.clear()   # HDF5 reads them itself
        hdf5 = [src.read(0, 98).positions, src.read(5, 40, atoms).positions, src.read(3, 60, stride=4).positions]
    for a, b, c in zip(fast, slow, hdf5, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
