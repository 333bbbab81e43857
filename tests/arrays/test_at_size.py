"""Arrays at their size: Dask chunks of whole stored chunks, every read counted whatever thread makes it,
times ``sel`` finds, a renumbered chain saved to netCDF, and errors that speak Python.

References are independent of trajscale: h5py reading the stored datasets (NumPy float64 sums),
MDAnalysis reading the same XTC parts, xarray's own netCDF writer and reader.
"""

from __future__ import annotations

import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.convert.convert import convert
from trajscale.errors import ConfigError, OutputError
from trajscale.h5md.layout import Layout

warnings.filterwarnings("ignore", module="MDAnalysis")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """PSF/DCD (98 frames of 3,341 atoms) as H5MD of one-frame chunks and of 7-frame chunks."""
    d = tmp_path_factory.mktemp("at_size")
    out = {}
    for name, chunks in (("frame", "frame"), ("seven", "7")):
        out[name] = str(d / f"{name}.h5md")
        convert(D.PSF, [D.DCD], out[name], layout=Layout.parse(chunks))
    return out


def stored_positions(path: str) -> np.ndarray:
    """The positions as stored, read by h5py (Å: trajscale's convert writes MDAnalysis's units)."""
    with h5py.File(path, "r") as f:
        ds = f["particles/all/position/value"]
        assert ds.attrs["unit"] in (b"Angstrom", "Angstrom")
        return ds[()].astype(np.float64)


def boundaries(chunks) -> list[int]:
    return list(np.cumsum((0, *chunks))[:-1])


@pytest.mark.slow
def test_one_frame_chunks_make_few_dask_chunks_of_whole_stored_chunks(stores, monkeypatch):
    """``chunks={}`` on a store of one-frame chunks: one Dask chunk for 98 frames of 40 kB, not 98; with a
    smaller target, chunks of whole 7-frame stored chunks; the means equal NumPy float64 over h5py's values."""
    # here, not at the module's top: xarray (and pandas) would cost every pytest worker at collection
    import xarray as xr

    from trajscale.arrays import dataset as dataset_module

    ds = ts.open_dataset(D.PSF, stores["frame"], chunks={})
    assert ds.sizes["frame"] == 98 and ds.positions.chunks[0] == (98,)
    assert ds.time.chunks[0] == ds.positions.chunks[0]
    want = stored_positions(stores["frame"]).mean(0)
    np.testing.assert_allclose(ds.positions.astype("float64").mean("frame").values, want, rtol=0, atol=1e-9)

    monkeypatch.setattr(dataset_module, "TARGET_CHUNK_BYTES", 30 * 3341 * 12)   # 30 frames a chunk at most
    seven = xr.open_dataset(stores["seven"], engine="trajscale", chunks={})
    chunks = seven.positions.chunks[0]
    assert chunks == (28, 28, 28, 14), chunks
    assert all(b % 7 == 0 for b in boundaries(chunks))
    assert seven.positions.encoding["trajscale_stored_chunks"] == 7
    with h5py.File(stores["seven"], "r") as f:
        assert f["particles/all/position/value"].chunks[0] == 7
    np.testing.assert_allclose(seven.positions.astype("float64").mean("frame").values,
                               stored_positions(stores["seven"]).mean(0), rtol=0, atol=1e-9)
    one = ts.open_dataset(D.PSF, stores["frame"], chunks={})
    assert len(one.positions.chunks[0]) == 4 and max(one.positions.chunks[0]) == 30   # not 98 tasks


def test_chunks_on_stored_boundaries_are_quiet_and_others_warn(stores):
    """A multiple of the stored chunk given by hand is quiet through trajscale.open_dataset; chunks that cut
    a stored chunk get xarray's warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = ts.open_dataset(D.PSF, stores["seven"], chunks={"frame": 14})
    assert ds.positions.chunks[0][:2] == (14, 14)
    with pytest.warns(UserWarning, match="separate the stored chunks"):
        ts.open_dataset(D.PSF, stores["seven"], chunks={"frame": 10})


def test_bytes_read_counts_the_threaded_schedulers_reads(stores):
    """Dask's threaded scheduler reads in its own threads: its reads are counted as the synchronous one's."""
    counts = {}
    for scheduler in ("synchronous", "threads"):
        ds = ts.open_dataset(D.PSF, stores["frame"], chunks={"frame": 7})
        before = ds.trajscale.bytes_read
        mean = ds.positions.astype("float64").mean("frame").compute(scheduler=scheduler, num_workers=2)
        counts[scheduler] = ds.trajscale.bytes_read - before
        np.testing.assert_allclose(mean.values, stored_positions(stores["frame"]).mean(0), rtol=0, atol=1e-9)
    assert counts["synchronous"] >= 98 * 3341 * 12
    assert counts["threads"] == counts["synchronous"], counts


def test_times_are_the_written_times_and_sel_finds_them():
    """adk_oplsaa.xtc stores 400.00003 for the frame written at 400 ps: ``sel(time=400)`` finds it, and the
    times are MDAnalysis's float32 times rounded to the nearest short decimal."""
    ds = ts.open_dataset(D.TPR, D.XTC)
    u = mda.Universe(D.TPR, D.XTC)
    raw = np.array([t.time for t in u.trajectory])
    assert raw[4] != 400.0   # the noise this is about
    np.testing.assert_array_equal(ds.time.values, np.round(raw.astype(np.float64), 3))
    assert ds.time.dtype == np.float64
    frame = ds.sel(time=400)
    assert int(frame.frame) == 4
    u.trajectory[4]
    np.testing.assert_array_equal(frame.positions.values, u.atoms.positions)


def write_restart_parts(folder, first_step: int) -> list[str]:
    """Two XTC parts of PSF/DCD frames 0-9 and 10-19, 1 ps apart, 500 steps a frame; the second part's
    steps restart at 0 (its times go on)."""
    u = mda.Universe(D.PSF, D.DCD)
    paths = []
    for k, (a, b) in enumerate([(0, 10), (10, 20)]):
        path = folder / f"part{k}.xtc"
        with mda.Writer(str(path), u.atoms.n_atoms) as w:
            for i, t in enumerate(u.trajectory[a:b]):
                t.data["step"] = (first_step if k == 0 else 0) + 500 * i
                t.time = float(a + i)
                w.write(u.atoms)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("first_step", [0, 2**31 - 5000])
def test_renumbered_restart_chain_saves_to_netcdf(tmp_path, first_step):
    """Steps that restart are renumbered to go on (past int32 after a long run): xarray's netCDF writer
    (netCDF-3 when only SciPy is installed) keeps every step exactly, and the positions are MDAnalysis's."""
    import xarray as xr

    paths = write_restart_parts(tmp_path, first_step)
    ds = ts.open_dataset(D.PSF, paths)
    want_steps = first_step + 500 * np.arange(20)
    np.testing.assert_array_equal(ds.step.values, want_steps)
    out = tmp_path / "chain.nc"
    ds.drop_vars(["name", "resname", "segid", "element"], errors="ignore").to_netcdf(out)
    with xr.open_dataset(out) as back:
        np.testing.assert_array_equal(back.step.values.astype(np.int64), want_steps)
        np.testing.assert_array_equal(back.time.values, np.arange(20.0))
        ref = np.array([t.positions.copy() for t in mda.Universe(D.PSF, paths).trajectory])
        np.testing.assert_array_equal(back.positions.values, ref)


def test_to_h5md_errors_speak_python(stores, tmp_path):
    """What to_h5md refuses names its keyword arguments and Layout, never a command-line flag."""
    ds = ts.open_dataset(D.PSF, stores["seven"]).isel(frame=slice(0, 4))
    out = tmp_path / "out.h5md"
    ds.trajscale.to_h5md(out)
    with pytest.raises(OutputError, match=r"overwrite=True") as exc:
        ds.trajscale.to_h5md(out)
    assert "--" not in str(exc.value)
    with pytest.raises(ConfigError, match=r"layout=Layout\(compression=") as exc:
        ds.trajscale.to_h5md(out, overwrite=True, precision=0.01, encoding="deltas")
    assert "--" not in str(exc.value)
    with pytest.raises(ConfigError, match="precision= must be positive"):
        ds.trajscale.to_h5md(out, overwrite=True, precision=-1.0)
    small = tmp_path / "small.h5md"
    ds.trajscale.to_h5md(small, layout=ts.Layout(compression="gzip", shuffle=True), precision=0.01)
    with h5py.File(small, "r") as f:
        stored = f["particles/all/position/value"]
        assert stored.compression == "gzip"
        np.testing.assert_allclose(stored[()], stored_positions(stores["seven"])[:4], rtol=0, atol=0.01)


def test_time_rounding_takes_float32_noise_only():
    """Float32's noise goes (a float32 time, a time computed from a float32 dt); a digit the dt has stays."""
    from trajscale.arrays.reads import tidy_times

    f32 = np.float32
    got = tidy_times(np.array([f32(400.00003), f32(0.004), 9.999999119200186, 0.0, f32(-2.2)], np.float64))
    assert got.tolist() == [400.0, 0.004, 10.0, 0.0, -2.2]
    kept = np.array([1000000.002, f32(700.0025), 131072.25], np.float64)   # dt 0.002 ps: three decimals
    assert tidy_times(kept, 3).tolist() == kept.tolist()
