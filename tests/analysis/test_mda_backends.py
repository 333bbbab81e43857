"""MDAnalysis's own analysis classes on trajscale's MPI and Dask backends give MDAnalysis's serial answer."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rdf, rms
from MDAnalysisTests import datafiles as D

from tests.conftest import run_mpi

warnings.filterwarnings("ignore", module="MDAnalysis")


@pytest.fixture(scope="module")
def serial():
    u = mda.Universe(D.PSF, D.DCD)
    w = mda.Universe(D.PSF_TRICLINIC, D.DCD_TRICLINIC)
    ow = w.select_atoms("name OH2")
    return {"rmsd": rms.RMSD(u.select_atoms("name CA")).run().results.rmsd,
            "rdf": rdf.InterRDF(ow, ow, nbins=40, range=(0.0, 8.0), exclusion_block=(1, 1)).run().results}


@pytest.mark.mpi
def test_mpi_backend_equals_serial(tmp_path, serial):
    pytest.importorskip("mpi4py")
    script = Path(__file__).with_name("mpi_mda_backend_script.py")
    proc = run_mpi(2, [str(script), str(tmp_path / "o.npz")], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(tmp_path / "o.npz")
    np.testing.assert_allclose(got["rmsd"], serial["rmsd"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got["count"], serial["rdf"].count)
    np.testing.assert_allclose(got["rdf"], serial["rdf"].rdf, rtol=1e-6)
    report = json.loads(str(got["report"]))
    assert report["executor"] == "mpi" and report["n_workers"] == 2
    assert sorted(w["worker"] for w in report["workers"]) == ["rank 0", "rank 1"]
    assert sum(t["stop"] - t["start"] for t in report["tasks"]) == 10
    assert "Can not parallelize" in str(got["refused"])


@pytest.mark.slow
def test_dask_backend_equals_serial(serial):
    pytest.importorskip("distributed")
    import trajscale.mda

    with trajscale.mda.DaskBackend(n_workers=2) as backend:
        u = mda.Universe(D.PSF, D.DCD)
        r = rms.RMSD(u.select_atoms("name CA")).run(backend=backend, n_parts=4, unsupported_backend=True)
        np.testing.assert_allclose(r.results.rmsd, serial["rmsd"], rtol=1e-6, atol=1e-6)
        assert r.report.executor == "dask" and r.report.n_tasks == 4
        assert sum(t.frames for t in r.report.tasks) == 98
        with pytest.raises(ValueError, match="Can not parallelize"):
            rms.RMSF(u.select_atoms("name CA")).run(backend=backend, unsupported_backend=True)
