"""RMSD on the MPI executor (``mpiexec -n 2``) equals MDAnalysis's rms.RMSD, several argument
combinations in one launch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.analysis.rmsd_cases import SYSTEMS, mdanalysis_table, parallel_cases
from tests.conftest import run_mpi

pytest.importorskip("mpi4py")
pytestmark = pytest.mark.mpi

SCRIPT = str(Path(__file__).with_name("mpi_rmsd_parity.py"))


def test_mpi_equals_mdanalysis(tmp_path, adk_vacuum_h5md):
    """PSF/DCD converted to H5MD (parallel HDF5 reads) and the triclinic DCD (MDAnalysis reads)."""
    out = tmp_path / "tables.npz"
    proc = run_mpi(2, [SCRIPT, str(out), adk_vacuum_h5md], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tables = np.load(out)
    checked = 0
    for name in ("adk_vacuum", "triclinic_water"):
        s = SYSTEMS[name]
        for case in parallel_cases(s.n_frames):
            got = tables[f"{name}:{case.id}"]
            want = mdanalysis_table(s, case)
            assert int(tables[f"{name}:{case.id}:workers"]) == 2
            assert got.shape == want.shape
            np.testing.assert_array_equal(got[:, 0], want[:, 0])
            np.testing.assert_allclose(got[:, 2:], want[:, 2:], atol=1e-4, rtol=0, err_msg=f"{name}: {case.id}")
            checked += 1
    assert checked == 4
