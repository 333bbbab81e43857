"""The one chunk reader (hdf5.chunks) over a local file's byte store: every layout's frames equal h5py's
own reads, or are left to HDF5; the local fast path is the compiled gather on the store's descriptor."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.sources.test_h5md_source import _read_syscalls
from trajscale.hdf5 import chunks as chunks_module
from trajscale.hdf5.chunks import ChunkIndex, ChunkReads, chunk_index
from trajscale.hdf5.runs import plan_atom_reads
from trajscale.sources import H5MDSource
from trajscale.storage.bytestore import LocalFile

N_FRAMES, N_ATOMS = 23, 500


def _dataset_file(path: Path, seed: int = 7, **create) -> np.ndarray:
    """An (23, 500, 3) dataset of distinct values written by h5py; returns the values."""
    values = np.random.default_rng(seed).normal(size=(N_FRAMES, N_ATOMS, 3)).astype(create.pop("dtype", np.float32))
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, **create)
    return values


def _reader(f: h5py.File, path: Path) -> ChunkReads:
    ds = f["x"]
    return ChunkReads(LocalFile(str(path)), ChunkIndex.of(ds, lazy=True), dataset=ds)


CASES = [(0, N_FRAMES, 1, None), (3, 19, 1, np.array([4, 5, 6, 300, 499])),
         (2, 23, 4, np.arange(100, 400)), (22, 23, 1, np.array([0, 499])),
         (1, 17, 3, np.array([499, 2, 250, 2]))]   # unsorted, repeated atoms


@pytest.mark.parametrize("create", [{}, {"chunks": (1, N_ATOMS, 3)}, {"chunks": (5, N_ATOMS, 3)},
                                    {"chunks": (23, N_ATOMS, 3)}], ids=["contiguous", "frame", "5", "all"])
def test_frames_and_atom_subsets_equal_numpy_through_the_gather(tmp_path, create):
    values = _dataset_file(tmp_path / "a.h5", **create)
    with h5py.File(tmp_path / "a.h5", "r") as f:
        reader = _reader(f, tmp_path / "a.h5")
        for start, stop, stride, atoms in CASES:
            plan = plan_atom_reads(atoms, N_ATOMS)
            n = len(range(start, stop, stride))
            out = np.full((n, N_ATOMS if atoms is None else len(atoms), 3), np.nan, np.float32)
            if plan.index is None and atoms is not None:
                out = out[:, :plan.n_columns]
            assert reader.read(start, n, stride, plan.runs, plan.index, out)
            expect = values[start:stop:stride] if atoms is None else values[start:stop:stride][:, atoms]
            np.testing.assert_array_equal(out, expect)
        assert reader.store.descriptor() >= 0   # (the compiled gather read them)
        reader.store.close()


@pytest.mark.parametrize("create", [{"chunks": (5, N_ATOMS, 3), "compression": "gzip"},
                                    {"chunks": (5, 100, 3)}, {"chunks": (5, 100, 1), "compression": "gzip"},
                                    {"dtype": np.float64}, {"dtype": ">f4"},
                                    {"chunks": (5, N_ATOMS, 3), "shuffle": True}],
                         ids=["gzip", "atom-chunks", "xyz-gzip", "float64", "big-endian", "shuffle"])
def test_every_other_layout_is_read_by_chunks_or_ranges_and_equals_numpy(tmp_path, create):
    """Compressed or split chunks come whole and decoded, other types by ranges: the same values as h5py's."""
    values = _dataset_file(tmp_path / "a.h5", **create)
    with h5py.File(tmp_path / "a.h5", "r") as f:
        reader = _reader(f, tmp_path / "a.h5")
        for start, stop, stride, atoms in CASES:
            plan = plan_atom_reads(atoms, N_ATOMS)
            n = len(range(start, stop, stride))
            buf = np.full((n, plan.n_columns, 3), np.nan, values.dtype)
            assert reader.read_runs(plan.runs, buf, start, stride)
            got = buf if plan.index is None else buf[:, plan.index]
            expect = values[start:stop:stride] if atoms is None else values[start:stop:stride][:, atoms]
            np.testing.assert_array_equal(got, expect)
        reader.close()


def test_a_file_with_a_userblock_is_left_to_hdf5(tmp_path):
    """HDF5's addresses start after a userblock: such a file is read through HDF5."""
    with h5py.File(tmp_path / "u.h5", "w", userblock_size=512) as f:
        f.create_dataset("x", data=np.zeros((4, 5, 3), np.float32))
    with h5py.File(tmp_path / "u.h5", "r") as f:
        assert ChunkIndex.of(f["x"]) is None


def test_unwritten_chunks_are_left_to_hdf5(tmp_path):
    """A chunk never written has no address: HDF5 gives its fill value."""
    with h5py.File(tmp_path / "a.h5", "w") as f:
        ds = f.create_dataset("x", shape=(20, 50, 3), chunks=(5, 50, 3), dtype=np.float32, fillvalue=-1)
        ds[0:5] = 1.0
        ds[15:20] = 2.0
    with h5py.File(tmp_path / "a.h5", "r") as f:
        reader = _reader(f, tmp_path / "a.h5")
        plan = plan_atom_reads(None, 50)
        out = np.empty((20, 50, 3), np.float32)
        assert not reader.read(0, 20, 1, plan.runs, plan.index, out)
        assert reader.read(15, 5, 1, plan.runs, plan.index, out[:5])
        np.testing.assert_array_equal(out[:5], 2.0)
        reader.store.close()


def test_a_file_truncated_under_the_reader_is_a_failed_read_not_garbage(tmp_path):
    values = _dataset_file(tmp_path / "a.h5", chunks=(5, N_ATOMS, 3))
    copy = tmp_path / "b.h5"
    shutil.copy(tmp_path / "a.h5", copy)
    with h5py.File(copy, "r") as f:
        reader = _reader(f, copy)
        plan = plan_atom_reads(None, N_ATOMS)
        out = np.empty((N_FRAMES, N_ATOMS, 3), np.float32)
        assert reader.read(0, N_FRAMES, 1, plan.runs, plan.index, out)
        np.testing.assert_array_equal(out, values)
        with open(copy, "r+b") as fh:   # the last chunks are gone
            fh.truncate(copy.stat().st_size - 5 * N_ATOMS * 12)
        assert not reader.read(0, N_FRAMES, 1, plan.runs, plan.index, out)
        reader.store.close()


def test_addresses_that_do_not_give_hdf5s_values_are_not_used(tmp_path):
    """The addresses are HDF5's to define: an index that points elsewhere is found out on its first read."""
    _dataset_file(tmp_path / "a.h5", chunks=(5, N_ATOMS, 3))
    with h5py.File(tmp_path / "a.h5", "r") as f:
        index = ChunkIndex.of(f["x"])
        index.offsets[0] += 12   # one atom further on
        reader = ChunkReads(LocalFile(str(tmp_path / "a.h5")), index, dataset=f["x"])
        plan = plan_atom_reads(None, N_ATOMS)
        assert not reader.read(0, 5, 1, plan.runs, plan.index, np.empty((5, N_ATOMS, 3), np.float32))
        assert index.checked is False
        reader.store.close()


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
def test_h5md_source_reads_one_call_per_frame_and_run_and_equals_hdf5(tmp_path, adk_vacuum_h5md):
    """The source's fast path: one read per frame and atom run (never per atom), the same values as HDF5."""
    atoms = np.r_[np.arange(10, 400, 15), np.arange(2500, 2600)]   # two runs: far apart
    with H5MDSource(adk_vacuum_h5md) as src:
        assert src._reads["position"].ready()
        src.read(0, 1, atoms)   # box/time/step and chunk addresses come once, not per block
        src.read(0, 98, atoms)
        before = _read_syscalls()
        own = _read_syscalls() - before   # reading /proc/self/io counts too
        before = _read_syscalls()
        fast = src.read(0, 98, atoms).positions.copy()
        calls = _read_syscalls() - before - own
        assert calls == 98 * len(plan_atom_reads(atoms, src.n_atoms).runs)
        src._reads.clear()
        np.testing.assert_array_equal(fast, src.read(0, 98, atoms).positions)
    with h5py.File(adk_vacuum_h5md, "r") as f:
        np.testing.assert_array_equal(fast, f["particles/all/position/value"][:, atoms])


class CountingFile(LocalFile):
    """A local file's store that counts what the reader asks of it."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.ranges = self.bytes = self.descriptors = 0

    def read_ranges(self, ranges):
        self.ranges += len(ranges)
        self.bytes += sum(b - a for a, b in ranges)
        return super().read_ranges(ranges)

    def descriptor(self) -> int:
        self.descriptors += 1
        return super().descriptor()


@pytest.mark.parametrize("layout", ["frame", "deltas"])
def test_a_local_read_goes_through_the_sources_byte_store(tmp_path, adk_vacuum, layout, monkeypatch):
    """The frames come from the byte store the Source reads (its descriptor: the gather of uncompressed
    frames, the stored Blosc chunks decoded in place), not from HDF5: the store counts them, and they equal
    HDF5's own read of the same file."""
    pytest.importorskip("hdf5plugin")
    from trajscale.convert.convert import convert
    from trajscale.h5md.layout import Layout

    path = str(tmp_path / f"{layout}.h5md")
    if layout == "frame":
        convert(adk_vacuum[0], [adk_vacuum[1]], path, layout=Layout.parse("frame"))
    else:
        convert(adk_vacuum[0], [adk_vacuum[1]], path, layout=Layout.parse("7", "blosc-lz4"), precision=0.01,
                encoding="deltas")
    monkeypatch.setattr(chunks_module, "_INDEXES", type(chunks_module._INDEXES)(chunks_module.INDEXES_MAX))
    atoms = np.arange(0, 3341, 7)
    with H5MDSource(path, store=CountingFile(path)) as src:
        store = src.store
        assert isinstance(store, CountingFile)
        got = src.read(0, 98, atoms).positions.copy()
        assert store.descriptors >= 1 and store.ranges == 0   # (pread on its descriptor, gathered or whole)
        before = (store.ranges, store.descriptors)
        src._reads.clear()   # HDF5 reads the same frames itself
        hdf5 = src.read(0, 98, atoms).positions
        assert (store.ranges, store.descriptors) == before
    np.testing.assert_array_equal(got, hdf5)
    if layout == "frame":
        with h5py.File(path, "r") as f:
            scale = np.float32(src.info.scales["position"])
            np.testing.assert_array_equal(got, f["particles/all/position/value"][:, atoms] * scale)


def test_addresses_are_looked_up_once_per_file_and_anew_when_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "a.h5"
    values = _dataset_file(path, chunks=(5, N_ATOMS, 3))
    monkeypatch.setattr(chunks_module, "_INDEXES", type(chunks_module._INDEXES)(chunks_module.INDEXES_MAX))
    plan = plan_atom_reads(None, N_ATOMS)
    out = np.empty((N_FRAMES, N_ATOMS, 3), np.float32)

    def read_all() -> ChunkIndex:
        store = LocalFile(str(path))
        with h5py.File(path, "r") as f:
            index = chunk_index(f["x"], store.identity)
            reader = ChunkReads(store, index, dataset=f["x"])
            assert reader.read(0, N_FRAMES, 1, plan.runs, plan.index, out)
            store.close()
        return index

    first = read_all()
    np.testing.assert_array_equal(out, values)
    assert (first.offsets >= 0).all() and len(first.offsets) == 5
    assert read_all() is first   # the second open looks nothing up
    new = _dataset_file(path, seed=8, chunks=(3, N_ATOMS, 3))   # rewritten: other values, chunks, places
    assert len(read_all().offsets) == 8
    np.testing.assert_array_equal(out, new)


def test_threads_reading_one_file_at_once_each_get_their_own_atoms(tmp_path):
    """A Dask worker runs tasks in several threads on one cached source: the gathers must not share a row."""
    import threading

    values = _dataset_file(tmp_path / "a.h5", chunks=(1, N_ATOMS, 3))
    wrong = []
    with h5py.File(tmp_path / "a.h5", "r") as f:
        reader = _reader(f, tmp_path / "a.h5")

        def work(atoms: np.ndarray) -> None:
            plan = plan_atom_reads(atoms, N_ATOMS)
            assert plan.index is not None   # a gather through the row buffer
            out = np.empty((N_FRAMES, len(atoms), 3), np.float32)
            for _ in range(200):
                reader.read(0, N_FRAMES, 1, plan.runs, plan.index, out)
                if not np.array_equal(out, values[:, atoms]):
                    wrong.append(len(atoms))

        threads = [threading.Thread(target=work, args=(np.arange(k, N_ATOMS, 5 + k),)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        reader.store.close()
    assert not wrong


def test_the_report_says_which_fields_were_read_at_their_addresses(adk_vacuum, adk_vacuum_h5md, tmp_path):
    import trajscale as ts
    from trajscale.convert.convert import convert
    from trajscale.h5md.layout import Layout

    r = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md)
    assert r.report.source.direct_reads == ("position",)
    packed = tmp_path / "gzip.h5md"
    convert(adk_vacuum[0], [adk_vacuum[1]], str(packed), layout=Layout.parse("auto", "gzip:1"))
    assert ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], str(packed)).report.source.direct_reads == ()


@pytest.mark.cli
def test_a_small_read_in_a_fresh_process_takes_the_compiled_path_without_numba(adk_vacuum_h5md):
    """The gather loop is a built extension: a five-frame read in a fresh process reads at the byte
    addresses at once (it waited for a 512 MiB read or numba's ~0.7 s load before) and loads no JIT."""
    import subprocess
    import sys

    code = ("import sys, importlib.machinery\nfrom trajscale.sources import H5MDSource\n"
            "from trajscale.storage import _pread\n"
            f"s = H5MDSource({adk_vacuum_h5md!r})\nb = s.read(0, 5, None)\n"
            "assert s._reads['position'].ready() and s.store.descriptor() >= 0\n"
            "print('numba' in sys.modules, _pread.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)))\n"
            "print(b.positions.sum(dtype='float64'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == ["False", "True"]
    with h5py.File(adk_vacuum_h5md, "r") as f:
        assert float(out[2]) == f["particles/all/position/value"][:5].sum(dtype=np.float64)


def test_the_loop_refuses_runs_beyond_its_buffers(tmp_path):
    """The compiled loop checks what it is given (a wrong table would write past the buffers)."""
    from trajscale.storage.pread import pread_gather

    _dataset_file(tmp_path / "a.h5")
    out = np.empty((2, 10, 3), np.float32)
    offsets = np.zeros(2, np.int64)
    with open(tmp_path / "a.h5", "rb") as fh:
        with pytest.raises(ValueError, match="columns"):
            pread_gather(fh.fileno(), offsets, np.array([[0, 0, 11]], np.int64), np.zeros(0, np.int64),
                         np.zeros((0, 3), np.float32), out)
        with pytest.raises(ValueError, match="index"):
            pread_gather(fh.fileno(), offsets, np.array([[0, 0, 10]], np.int64), np.arange(5, 15),
                         np.zeros((10, 3), np.float32), out)
