"""The H5MD Source: slab reads, atom subsets, units, fixed step/time, errors."""

from __future__ import annotations

from pathlib import Path

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from trajscale.convert.convert import convert
from trajscale.errors import FrameRangeError, InputFileError, NotH5MDError
from trajscale.h5md import source as h5md_module
from trajscale.h5md.layout import Layout
from trajscale.sources import H5MDSource, MDAPartSource, open_source, source_from_config


@pytest.fixture(scope="module")
def layouts(tmp_path_factory, adk_vacuum):
    d = tmp_path_factory.mktemp("layouts")
    out = {}
    for name, lay in {"frame": Layout.parse("frame"), "auto": Layout.parse("auto"),
                      "7": Layout.parse("7"), "contiguous": Layout.parse("contiguous"),
                      "gzip": Layout.parse("auto", "gzip:1"), "h5py": Layout.parse("h5py")}.items():
        p = d / f"{name}.h5md"
        convert(adk_vacuum[0], [adk_vacuum[1]], str(p), layout=lay)
        out[name] = str(p)
    return out


@pytest.fixture(scope="module")
def reference(adk_vacuum):
    u = mda.Universe(*adk_vacuum)
    return u.trajectory.timeseries(order="fac")


@pytest.mark.parametrize("layout", ["frame", "auto", "7", "contiguous", "gzip", "h5py"])
def test_blocks_equal_mdanalysis(layouts, reference, layout):
    with H5MDSource(layouts[layout]) as src:
        assert src.n_frames == 98 and src.n_atoms == 3341
        b = src.read(10, 60)
        np.testing.assert_array_equal(b.positions, reference[10:60])
        np.testing.assert_array_equal(b.frames, np.arange(10, 60))
        atoms = np.array([5, 17, 300, 301, 2000])
        np.testing.assert_array_equal(src.read(3, 40, atoms).positions, reference[3:40][:, atoms])
        scattered = np.array([0, 3340])          # span > threshold: reads whole frames
        np.testing.assert_array_equal(src.read(0, 5, scattered).positions, reference[:5][:, scattered])


def test_task_sources_reuse_one_buffer_and_stay_exact(layouts, reference):
    """With reuse_buffers (as in the task wrapper) reads land in one buffer per thread,
    still exact; without it every Block owns its arrays."""
    import threading

    with H5MDSource(layouts["auto"]) as src:
        a, b = src.read(0, 40), src.read(40, 80)
        assert not np.shares_memory(a.positions, b.positions)
        np.testing.assert_array_equal(a.positions, reference[:40])
        src.reuse_buffers = True
        first = src.read(0, 40).positions
        second = src.read(50, 60).positions
        assert np.shares_memory(first, second)
        np.testing.assert_array_equal(second, reference[50:60])
        other = []
        t = threading.Thread(target=lambda: other.append(src.read(0, 10).positions))
        t.start()
        t.join()
        assert not np.shares_memory(other[0], second)
        np.testing.assert_array_equal(other[0], reference[:10])


def test_box_time_step_equal_mdanalysis_and_blocks_own_them(tmp_path, adk_water):
    """Box, time and step come from a per-file cache: equal to MDAnalysis, and a block may change its copy."""
    h5 = tmp_path / "water.h5md"
    convert(adk_water["gro"], [adk_water["xtc"]], str(h5))
    u = mda.Universe(adk_water["gro"], adk_water["xtc"])
    times = np.array([ts.time for ts in u.trajectory[2:8]])
    boxes = np.array([ts.dimensions.copy() for ts in u.trajectory[2:8]])
    with h5py.File(h5, "r") as f:
        steps = f["particles/all/position/step"][2:8]
    with H5MDSource(str(h5)) as src:
        b = src.read(2, 8, np.arange(10))
        np.testing.assert_allclose(b.time, times, rtol=1e-6)
        np.testing.assert_allclose(b.box, boxes, rtol=1e-6)
        np.testing.assert_array_equal(b.step, steps)
        b.time[:] = -1
        b.box[:] = 0
        again = src.read(2, 8, np.arange(10))
        np.testing.assert_allclose(again.time, times, rtol=1e-6)
        np.testing.assert_allclose(again.box, boxes, rtol=1e-6)


def test_one_hdf5_call_per_slab(layouts, monkeypatch):
    """A block HDF5 reads is one hyperslab read, never one call per frame."""
    calls = []
    with H5MDSource(layouts["frame"]) as src:
        src._reads.clear()   # what HDF5 reads (under MPI-IO; a chunk never written)
        orig = src._read_runs
        monkeypatch.setattr(src, "_read_runs", lambda *a: (calls.append(a[2]), orig(*a)))
        src.read(0, 98, np.arange(100, 400))
    assert len(calls) == 1


def _read_syscalls() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("syscr:"):
            return int(line.split()[1])
    raise AssertionError("no syscr in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
def test_chunks_that_split_frames_are_read_through_a_cache(layouts):
    """h5py's own chunk guess splits xyz: read in place, every float would be a read call."""
    with H5MDSource(layouts["h5py"]) as src:
        ds = src.file["particles/all/position/value"]
        assert ds.chunks[2] < 3   # the layout does split xyz
        n_chunks = int(np.prod([-(-n // c) for n, c in zip(ds.shape, ds.chunks, strict=False)]))
        before = _read_syscalls()
        src.read(0, 98)
        src.read(5, 60, np.arange(100, 400))
        calls = _read_syscalls() - before
    assert calls < 4 * n_chunks, f"{calls} read calls for {n_chunks} chunks"


def test_slabs_align_to_chunks(layouts, monkeypatch):
    monkeypatch.setattr(h5md_module, "MAX_SLAB_BYTES", 7 * 3341 * 12 * 2)
    with H5MDSource(layouts["7"]) as src:
        slabs = [(3 + i, 3 + j) for i, j in src._slabs(3, 95, 1, 3341)]   # rows -> frames
    assert slabs[0] == (3, 14) and all(a % 7 == 0 for a, _ in slabs[1:]) and slabs[-1][1] == 98


def test_fixed_step_time_and_nm_units(tmp_path):
    path = tmp_path / "fixed.h5md"
    pos = np.random.default_rng(0).random((6, 4, 3)).astype(np.float32)
    with h5py.File(path, "w") as f:
        g = f.create_group("particles/water/position")
        g.create_dataset("value", data=pos).attrs["unit"] = "nm"
        g.create_dataset("step", data=100).attrs["offset"] = 7
        t = g.create_dataset("time", data=2.0)
        t.attrs["offset"] = 1.0
        t.attrs["unit"] = "fs"
        box = f["particles/water"].create_group("box")
        box.attrs["boundary"] = np.array([b"periodic"] * 3)
        box.create_dataset("edges", data=np.array([3.0, 4.0, 5.0])).attrs["unit"] = "nm"   # fixed
    with H5MDSource(str(path)) as src:
        b = src.read(0, 6)
    np.testing.assert_allclose(b.positions, pos * 10, rtol=1e-6)
    np.testing.assert_array_equal(b.step, 7 + 100 * np.arange(6))
    np.testing.assert_allclose(b.time, (1.0 + 2.0 * np.arange(6)) * 1e-3)
    np.testing.assert_allclose(b.box[0], [30, 40, 50, 90, 90, 90])


def test_config_roundtrip(layouts, adk_vacuum):
    with open_source(layouts["auto"]) as src:
        cfg = src.get_config()
        assert cfg["kind"] == "h5md"
        with source_from_config(cfg) as again:
            np.testing.assert_array_equal(again.read(0, 2).positions, src.read(0, 2).positions)
    with open_source(adk_vacuum[1], adk_vacuum[0]) as src:
        assert isinstance(src, MDAPartSource)
        with source_from_config(src.get_config()) as again:
            np.testing.assert_array_equal(again.read(5, 9).positions, src.read(5, 9).positions)


def test_errors(tmp_path, layouts):
    with pytest.raises(InputFileError, match="no such file"):
        H5MDSource(str(tmp_path / "missing.h5md"))
    with pytest.raises(InputFileError, match="a folder, not a file"):
        H5MDSource(str(tmp_path))
    trunc = tmp_path / "trunc.h5md"
    trunc.write_bytes(open(layouts["frame"], "rb").read()[:5000])
    with pytest.raises(InputFileError, match="trunc.h5md"):
        H5MDSource(str(trunc))
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(NotH5MDError, match="not an H5MD file"):
        H5MDSource(str(plain))
    nopos = tmp_path / "nopos.h5md"
    with h5py.File(nopos, "w") as f:
        f.create_group("particles/all/velocity")
    with pytest.raises(NotH5MDError, match="position"):
        H5MDSource(str(nopos))
    with H5MDSource(layouts["frame"]) as src, pytest.raises(FrameRangeError):
        src.read(90, 120)


def test_box_time_step_are_read_once_per_unchanged_file(tmp_path, adk_water, monkeypatch):
    """A session's next source on the same file reads no box/time/step; a rewritten file is read anew."""
    h5 = tmp_path / "water.h5md"
    convert(adk_water["gro"], [adk_water["xtc"]], str(h5))
    u = mda.Universe(adk_water["gro"], adk_water["xtc"])
    times = np.array([ts.time for ts in u.trajectory])
    calls = []
    orig = H5MDSource._frame_meta_uncached
    monkeypatch.setattr(H5MDSource, "_frame_meta_uncached",
                        lambda self, a, b: (calls.append((a, b)), orig(self, a, b))[1])
    for _ in range(3):
        with H5MDSource(str(h5)) as src:
            np.testing.assert_allclose(src.read(0, 1, np.arange(5)).time, times[:1], rtol=1e-6)
            b = src.read(0, 10, np.arange(5))
            np.testing.assert_allclose(b.time, times, rtol=1e-6)
            b.time[:] = -1   # a block's copy: the kept values stay
    assert calls == [(0, 1), (0, 10)]
    convert(adk_water["gro"], [adk_water["xtc"], adk_water["xtc"]], str(h5), overwrite=True)   # 20 frames now
    with H5MDSource(str(h5)) as src:
        assert len(src.read(0, 20, np.arange(5)).time) == 20
    assert calls[-1] == (0, 20)
