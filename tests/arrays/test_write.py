"""``ds.trajscale.to_h5md``: a Dataset (a selection, a strided time axis, computed positions) written as H5MD
that MDAnalysis's H5MDReader reads back, in bounded slabs, never over an existing file."""

from __future__ import annotations

import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.errors import ConfigError, OutputError

warnings.filterwarnings("ignore", module="MDAnalysis")


@pytest.fixture(scope="module")
def water(tmp_path_factory):
    from trajscale.convert.convert import convert

    out = tmp_path_factory.mktemp("w") / "water.h5md"
    convert(D.TPR, [D.XTC], str(out))
    return str(out)


def test_selection_strided_written_back_reads_in_mdanalysis(water, tmp_path):
    ds = ts.open_dataset(D.TPR, water, chunks={})
    sub = ds.trajscale.select("protein").isel(frame=slice(1, None, 3))
    out = tmp_path / "protein.h5md"
    sub.trajscale.to_h5md(out, max_slab_mb=0.01)   # slabs of one chunk: many writes
    ref = mda.Universe(D.TPR, D.XTC)
    protein = ref.select_atoms("protein")
    protein.write(str(tmp_path / "protein.pdb"))   # the selection's own topology, written by MDAnalysis
    got = mda.Universe(str(tmp_path / "protein.pdb"), str(out))
    assert got.trajectory.n_frames == 3 and got.atoms.n_atoms == protein.n_atoms
    for ts_got, ts_ref in zip(got.trajectory, ref.trajectory[1::3], strict=True):
        np.testing.assert_allclose(ts_got.positions, protein.positions, atol=1e-4)
        np.testing.assert_allclose(ts_got.dimensions, ts_ref.dimensions, rtol=1e-6)
        assert ts_got.time == pytest.approx(ts_ref.time, abs=1e-4)
        assert ts_got.data["step"] == ts_ref.data["step"]
    with h5py.File(out) as f:   # the labels travel with the atoms (the file is its own topology)
        np.testing.assert_array_equal(f["particles/all/name"][()].astype(str), protein.names)
        assert f["particles/all/position/value"].attrs["unit"] in (b"Angstrom", "Angstrom")


def test_computed_positions_written_and_existing_file_refused(water, tmp_path):
    """Positions centred on their per-frame mean (computed lazily by Dask) are written as they are; a second
    write is refused without overwrite, and the Dataset's own file never."""
    ds = ts.open_dataset(D.TPR, water, chunks={}, select="name CA")
    centred = ds.assign(positions=ds.positions - ds.positions.mean("atom"))
    out = tmp_path / "centred.h5md"
    centred.trajscale.to_h5md(out)
    u = mda.Universe(D.TPR, D.XTC)
    ca = u.select_atoms("name CA")
    ca.write(str(tmp_path / "ca.pdb"))
    got = mda.Universe(str(tmp_path / "ca.pdb"), str(out))
    for t, _ in zip(got.trajectory, u.trajectory, strict=True):
        want = ca.positions.astype(np.float64)
        np.testing.assert_allclose(t.positions, want - want.mean(0), atol=1e-3)
    before = out.read_bytes()
    with pytest.raises(OutputError, match="already exists"):
        centred.trajscale.to_h5md(out)
    assert out.read_bytes() == before
    centred.trajscale.to_h5md(out, overwrite=True)
    with pytest.raises(OutputError):
        ds.trajscale.to_h5md(water, overwrite=True)
    assert not list(tmp_path.glob(".*.tmp-*"))


def test_a_reduction_over_frames_is_refused(water, tmp_path):
    ds = ts.open_dataset(D.TPR, water)
    mean = ds.positions.mean("frame").expand_dims(frame=1).to_dataset(name="positions")
    with pytest.raises(ConfigError, match="no 'time'"):
        mean.trajscale.to_h5md(tmp_path / "mean.h5md")
    nm = ds.assign(positions=ds.positions / 10).assign_attrs()
    nm.positions.attrs["units"] = "nm"
    with pytest.raises(ConfigError, match="'nm'"):
        nm.trajscale.to_h5md(tmp_path / "nm.h5md")
    assert not (tmp_path / "mean.h5md").exists() and not (tmp_path / "nm.h5md").exists()
