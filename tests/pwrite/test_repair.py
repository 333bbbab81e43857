"""``repair`` on files whose last frame is incomplete (written by H5MDWriter, stopped before commit)."""

from __future__ import annotations

import logging

import h5py
import numpy as np
import pytest
from MDAnalysis.coordinates.H5MD import H5MDReader

from tests.conftest import run_cli_here
from tests.pwrite.frames import adk_frames
from trajscale.h5md.layout import Layout
from trajscale.h5md.writer import H5MDWriter
from trajscale.pwrite import repair
from trajscale.sources import H5MDSource

pytestmark = pytest.mark.cli


def interrupted(path, chunks: str, data) -> None:
    """Three frames committed, a fourth written but never committed (as a killed job leaves it)."""
    n_atoms = data["positions"].shape[1]
    w = H5MDWriter(path, n_atoms, n_frames=5, layout=Layout.parse(chunks), fields=("position", "velocity"))
    w.write(position=data["positions"][:3], velocity=data["velocities"][:3], step=data["step"][:3],
            time=data["time"][:3], box=data["box"][:3])
    w.reserve(4)
    w.value("position")[3] = data["positions"][3]
    w.file.flush()
    w.file.close()   # no commit, no trim: what SIGKILL leaves


@pytest.mark.parametrize("chunks", ["auto", "contiguous"])
def test_repair_truncates_to_complete_frames(tmp_path, caplog, chunks):
    data = adk_frames(5)
    out = tmp_path / "cut.h5md"
    interrupted(out, chunks, data)
    with h5py.File(out) as f:
        assert f["particles/all/position/value"].shape[0] == 5 and f["particles/all/position/step"].shape == (3,)
    caplog.set_level(logging.WARNING)
    src = H5MDSource(str(out))
    assert src.n_frames == 3
    np.testing.assert_array_equal(src.read(0, 3).positions, data["positions"][:3])
    src.close()
    assert "row(s) after the last complete frame (3) ignored" in caplog.text
    proc = run_cli_here("repair", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "kept 3 complete frames" in proc.stdout and ("copy" if chunks == "contiguous" else "resize") in proc.stdout
    assert not list(tmp_path.glob(".*tmp*"))
    r = H5MDReader(str(out))
    assert r.n_frames == 3
    for i, ts in enumerate(r):
        np.testing.assert_array_equal(ts.positions, data["positions"][i])
        np.testing.assert_array_equal(ts.velocities, data["velocities"][i])
        assert ts.data["step"] == data["step"][i]
    r.close()
    with h5py.File(out) as f:   # hard links kept: one step dataset shared
        assert f["particles/all/position/step"].id == f["particles/all/velocity/step"].id
    assert repair(out).method == "none"


def test_repair_bad_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.h5md"
    bad.write_bytes(b"not hdf5 at all")
    proc = run_cli_here("repair", str(bad))
    assert proc.returncode == 2 and "not an HDF5 file" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli_here("repair", "--help")
    assert proc.returncode == 0 and "last complete frame" in proc.stdout


@pytest.mark.parametrize("chunks", ["auto", "contiguous"])
def test_a_step_grown_before_its_time_is_an_incomplete_frame(tmp_path, caplog, chunks):
    """Killed between growing step and time (HDF5 may write either's extent first): 3 complete frames."""
    data = adk_frames(5)
    out = tmp_path / "cut.h5md"
    interrupted(out, chunks, data)
    with h5py.File(out, "r+") as f:
        f["particles/all/position/step"].resize(4, axis=0)   # the fourth frame's step, never its time
        f["particles/all/position/step"][3] = data["step"][3]
    caplog.set_level(logging.WARNING)
    src = H5MDSource(str(out))
    assert src.n_frames == 3
    np.testing.assert_array_equal(src.read(0, 3).step, data["step"][:3])
    src.close()
    assert "after the last complete frame (3) ignored" in caplog.text
    proc = run_cli_here("repair", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "kept 3 complete frames" in proc.stdout
    with h5py.File(out) as f:
        assert {f[f"particles/all/{e}/{k}"].shape[0] for e in ("position", "velocity")
                for k in ("value", "step", "time")} == {3}
        assert f["particles/all/position/step"].id == f["particles/all/velocity/step"].id
    r = H5MDReader(str(out))
    assert r.n_frames == 3
    assert [ts.data["step"] for ts in r] == list(data["step"][:3])
    r.close()
    assert repair(out).method == "none"
