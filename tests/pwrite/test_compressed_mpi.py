"""Compressed and lossy files under MPI (issue 14): ``mpiexec -n 2 trajscale convert --compression``
writes filtered datasets collectively (parallel HDF5 allows nothing else), and ranks read
compressed and delta-coded files through the mpio driver, collectively or not.

References: MDAnalysis reading the DCD, and the serial RMSD of the uncompressed file.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

import trajscale as ts
from tests.conftest import run_mpi
from trajscale.convert.rechunk import rechunk
from trajscale.h5md.layout import Layout
from trajscale.parallel import h5py_has_mpi

pytest.importorskip("mpi4py")
pytest.importorskip("hdf5plugin")
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(not h5py_has_mpi(), reason="h5py without parallel HDF5")]
SCRIPT = str(Path(__file__).parents[1] / "executors" / "mpi_rmsd_script.py")


@pytest.mark.parametrize("codec, filter_id", [("blosc-zstd", "32001"), ("gzip:1", "gzip"), ("zstd", "32015")])
def test_mpi_convert_writes_compressed_file(tmp_path, adk_vacuum, codec, filter_id):
    out = tmp_path / "c.h5md"
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "convert", *adk_vacuum, "-o", str(out), "--chunks", "7",
                       "--compression", codec, "--no-progress"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with h5py.File(out) as f:
        assert filter_id in f["particles/all/position/value"]._filters
    import hdf5plugin  # noqa: F401

    ref = mda.Universe(*adk_vacuum).trajectory.timeseries(order="fac")
    np.testing.assert_array_equal(mda.Universe(adk_vacuum[0], str(out)).trajectory.timeseries(order="fac"), ref)


@pytest.mark.parametrize("collective", [False, True])
@pytest.mark.parametrize("kind", ["blosc-zstd", "deltas"])
def test_mpi_ranks_read_compressed_and_lossy_files(tmp_path, adk_vacuum, adk_vacuum_h5md, kind, collective):
    path = tmp_path / f"{kind}.h5md"
    rechunk(adk_vacuum_h5md, path, Layout.parse("5", "blosc-zstd"),
            precision=0.01 if kind == "deltas" else None, encoding="deltas" if kind == "deltas" else "floats")
    out = tmp_path / "r.npz"
    proc = run_mpi(2, [SCRIPT, adk_vacuum[0], str(path), "--out", str(out), "--driver", "mpio", "--tasks", "5",
                       *(["--collective"] if collective else [])], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(out)["table"]
    ref = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md).table()
    assert got.shape == ref.shape
    if kind == "deltas":
        assert np.abs(got - ref).max() < 1e-3
    else:
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)
