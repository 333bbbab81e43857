"""WriterSettings: the options of a ParallelWriter as one checked record, and the keyword call it fills."""

from __future__ import annotations

import dataclasses

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests.datafiles import PSF

from tests.pwrite.frames import adk_frames
from trajscale import ParallelWriter
from trajscale.errors import ConfigError
from trajscale.pwrite import WriterSettings


def test_an_unknown_option_is_one_error_naming_it_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match=r"no option 'velocity', 'zip'") as err:
        ParallelWriter(tmp_path / "x.h5md", 10, velocity=True, zip="gzip")
    assert "velocities" in str(err.value)   # the known options are listed
    assert not list(tmp_path.iterdir())


def test_settings_are_checked_where_they_are_made():
    with pytest.raises(ConfigError, match="unknown strategy 'fast'"):
        WriterSettings(strategy="fast")
    with pytest.raises(ConfigError, match="unknown unit system"):
        WriterSettings(units="furlongs")
    with pytest.raises(ConfigError, match="--chunks must be"):
        WriterSettings(chunks="many")
    with pytest.raises(ConfigError, match="contiguous"):
        WriterSettings(chunks="contiguous", compression="gzip")


def test_settings_are_frozen_and_keep_their_own_units():
    units = {"position": "nm"}
    s = WriterSettings(units=units)
    units["position"] = "pm"
    assert s.file_units()["position"] == "nm"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.strategy = "gather"
    assert WriterSettings.of(s, strategy="gather").strategy == "gather" and s.strategy == "collective"
    assert set(WriterSettings.names()) >= {"strategy", "chunks", "units", "velocities", "resume_at"}


def test_a_settings_record_writes_the_file_its_keyword_options_write(tmp_path):
    """settings= with a keyword beside it (which replaces the field) gives the same file as the keyword call,
    in the settings' units: MDAnalysis reads the positions back in Å."""
    data = adk_frames()
    n_atoms = data["positions"].shape[1]
    ids = np.arange(n_atoms)

    def write(path, **kw):
        with ParallelWriter(path, n_atoms, **kw) as w:
            for i in range(3):
                w.write(step=data["step"][i], time=data["time"][i], box=data["box"][i], ids=ids,
                        positions=data["positions"][i], velocities=data["velocities"][i])

    write(tmp_path / "kw.h5md", units="gromacs", velocities=True, chunks=2)
    write(tmp_path / "rec.h5md", settings=WriterSettings(units="gromacs", chunks=2), velocities=True)
    with h5py.File(tmp_path / "kw.h5md") as a, h5py.File(tmp_path / "rec.h5md") as b:
        for name in ("position", "velocity"):
            va, vb = a[f"particles/all/{name}/value"], b[f"particles/all/{name}/value"]
            assert va.chunks == vb.chunks == (2, n_atoms, 3)
            assert va.attrs["unit"] == vb.attrs["unit"]
            np.testing.assert_array_equal(va[()], vb[()])
        assert b["particles/all/position/value"].attrs["unit"] == "nm"
    u = mda.Universe(PSF, str(tmp_path / "rec.h5md"))
    np.testing.assert_allclose(u.trajectory[2].positions, data["positions"][2], rtol=1e-6, atol=1e-4)
