"""``mpiexec -n N trajscale convert`` writes one file through ParallelWriter.write_frames.

Reference: the serial ``convert`` of the same input (its datasets), and MDAnalysis
reading the input itself.
"""

from __future__ import annotations

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import run_mpi
from trajscale.convert.convert import convert
from trajscale.convert.verify import verify
from trajscale.h5md.layout import Layout

pytest.importorskip("mpi4py")
pytestmark = pytest.mark.mpi

INPUTS = {"dcd-twice": (D.PSF, [D.DCD, D.DCD]),   # 196 frames, the second copy renumbered
          "trr": (D.TPR, [D.TRR])}                 # box and velocities; 47,681 atoms
DATASETS = ("position/value", "position/step", "position/time", "velocity/value", "force/value",
            "box/edges/value")


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("system", INPUTS)
def test_mpi_convert_equals_serial(tmp_path, system, n):
    top, trajs = INPUTS[system]
    serial = tmp_path / "serial.h5md"
    convert(top, trajs, str(serial), layout=Layout.parse("3"))
    out = tmp_path / "mpi.h5md"
    proc = run_mpi(n, ["-m", "trajscale.cli.main", "convert", top, *trajs, "-o", str(out), "--chunks", "3"],
                   timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(tmp_path.glob(".*tmp*"))
    with h5py.File(serial) as a, h5py.File(out) as b:
        present = [d for d in DATASETS if f"particles/all/{d}" in a]
        assert "position/value" in present
        assert system != "trr" or {"velocity/value", "box/edges/value"} <= set(present)
        for d in present:
            np.testing.assert_array_equal(b[f"particles/all/{d}"][()], a[f"particles/all/{d}"][()], err_msg=d)
    rep = verify(top, trajs, str(out))   # against the inputs read by MDAnalysis, frame by frame
    assert rep.ok and rep.n_frames == ref_frames(top, trajs), rep.problems
    u, ref = mda.Universe(top, str(out)), mda.Universe(top, *trajs)
    assert u.trajectory.n_frames == ref.trajectory.n_frames
    for ts, rts in zip(u.trajectory[::3], ref.trajectory[::3], strict=False):
        np.testing.assert_array_equal(ts.positions, rts.positions)


def ref_frames(top, trajs) -> int:
    return mda.Universe(top, *trajs).trajectory.n_frames


def test_mpi_convert_refuses_existing_output_on_every_rank(tmp_path):
    out = tmp_path / "exists.h5md"
    out.write_text("keep me")
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "convert", D.PSF, D.DCD, "-o", str(out)], timeout=120)
    assert proc.returncode != 0 and "already exists" in proc.stderr and "Traceback" not in proc.stderr
    assert out.read_text() == "keep me"
