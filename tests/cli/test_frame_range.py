"""``--start``/``--stop`` take negative values as Python slices do, as MDAnalysis's ``run`` and slicing do."""

from __future__ import annotations

import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

import trajscale as ts
from tests.conftest import run_cli_here
from trajscale.errors import FrameRangeError

warnings.filterwarnings("ignore", module="MDAnalysis")


@pytest.mark.parametrize(("start", "stop", "step"), [(-20, -5, 1), (-30, None, 4), (5, 1000, 7), (None, -90, 1)])
def test_run_takes_slice_bounds_as_mdanalysis(adk_vacuum, adk_vacuum_h5md, start, stop, step):
    u = mda.Universe(*adk_vacuum)
    want = rms.RMSD(u, select="name CA").run(start=start, stop=stop, step=step).results.rmsd
    got = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md, start=start, stop=stop, step=step)
    np.testing.assert_array_equal(got.frames, want[:, 0].astype(int))
    np.testing.assert_allclose(got.rmsd, want[:, 2], atol=1e-4)


def test_a_range_of_no_frame_is_one_clear_error(adk_vacuum, adk_vacuum_h5md):
    with pytest.raises(FrameRangeError, match="selects none of its 98 frames"):
        ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md, start=-5, stop=-10)


def test_cli_run_and_convert_with_negative_bounds(tmp_path, adk_vacuum, adk_vacuum_h5md):
    u = mda.Universe(*adk_vacuum)
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--select", "name CA", "--start", "-20",
                   "--stop", "-5", "--step", "2", "--out", "r.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    want = rms.RMSD(u, select="name CA").run(start=-20, stop=-5, step=2).results.rmsd
    got = np.loadtxt(tmp_path / "r.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(got[:, 0], want[:, 0])
    np.testing.assert_allclose(got[:, 2], want[:, 2], atol=1e-4)

    proc = run_cli_here("convert", *adk_vacuum, "-o", "c.h5md", "--start", "-10", "--stop", "-2", "--step", "3",
                   "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ref = [(t.time, t.positions.copy()) for t in u.trajectory[-10:-2:3]]
    with h5py.File(tmp_path / "c.h5md") as f:
        np.testing.assert_allclose(f["particles/all/position/time"][()], [t for t, _ in ref], atol=1e-4)
        np.testing.assert_allclose(f["particles/all/position/value"][()], [x for _, x in ref], atol=1e-4)
