"""The backend outside this process: found by xarray in a fresh interpreter, and computed on by a Dask cluster
of separate processes (an external ``dask scheduler`` and two ``dask worker`` processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

import trajscale as ts
from tests.dask_cluster import external_dask


@pytest.mark.cli
def test_engine_found_in_a_fresh_interpreter_without_importing_trajscale(adk_vacuum_h5md):
    """``engine="trajscale"`` comes from the entry point: trajscale is imported by xarray, not by the user."""
    code = f"""
import json, sys
assert "trajscale" not in sys.modules
import xarray as xr
assert "trajscale" not in sys.modules
ds = xr.open_dataset({adk_vacuum_h5md!r}, engine="trajscale")
print(json.dumps({{"sizes": dict(ds.sizes), "x": ds.positions[7, 100].values.tolist(),
                  "accessor": hasattr(ds, "trajscale"), "guess": "trajscale" in xr.backends.list_engines()}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    u = mda.Universe(D.PSF, D.DCD)
    u.trajectory[7]
    assert got["sizes"] == {"frame": 98, "atom": 3341, "spatial": 3}
    np.testing.assert_allclose(got["x"], u.atoms.positions[100], atol=1e-5)
    assert got["accessor"] and got["guess"]


@pytest.mark.cli
@pytest.mark.slow
def test_external_dask_cluster_gives_the_serial_numbers(adk_vacuum_h5md, tmp_path):
    """A scheduler and two workers started here (free ports), torn down after: the mean structure and the
    positional covariance of the CA atoms computed on them equal the serial compute, bit for bit."""
    distributed = pytest.importorskip("distributed")
    env = dict(os.environ, OMP_NUM_THREADS="1", DASK_DISTRIBUTED__WORKER__DAEMON="False")
    with external_dask(tmp_path, 2, env=env) as address:
        ds = ts.open_dataset(D.PSF, adk_vacuum_h5md, chunks={"frame": 10}, select="name CA")
        x = ds.positions.astype("float64")
        mean = x.mean("frame")
        cov = xr_cov(x - mean)
        serial = [a.compute(scheduler="synchronous").values for a in (mean, cov)]
        with distributed.Client(address, timeout=120) as client:
            client.wait_for_workers(2, timeout=120)
            on_cluster = [a.compute().values for a in (mean, cov)]
            workers = {w for w in client.run(os.getpid).values()}
        assert len(workers) == 2 and os.getpid() not in workers
        for a, b in zip(serial, on_cluster, strict=True):
            np.testing.assert_array_equal(a, b)
        u = mda.Universe(D.PSF, D.DCD)
        ca = u.select_atoms("name CA")
        ref = np.array([ca.positions.astype(np.float64) for _ in u.trajectory])
        np.testing.assert_allclose(serial[0], ref.mean(0), atol=1e-9)


def xr_cov(d):
    """The 3N x 3N covariance of displacements over frames, as array code."""
    import xarray as xr

    flat = xr.DataArray(d.data.reshape(d.sizes["frame"], -1), dims=("frame", "dof"))
    return xr.dot(flat, flat.rename(dof="dof2"), dim="frame") / (d.sizes["frame"] - 1)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_a_topology_seen_before_opens_without_mdanalysis(tmp_path):
    """The topology's labels and the selection come from trajscale's caches the second time: a fresh
    interpreter opening the same files and selecting the same atoms never imports MDAnalysis (a TPR: MDAnalysis
    parses it the first time, where a GRO or PDB is read from its columns even then)."""
    code = f"""
import json, sys
import trajscale as ts
ds = ts.open_dataset({D.TPR!r}, {D.XTC!r})
ca = ds.trajscale.atoms("name CA")
print(json.dumps({{"mda": "MDAnalysis" in sys.modules, "names": ds.name.values[:50].tolist(),
                  "resids": ds.resid.values[-5:].tolist(), "ca": ca.tolist()}}))
"""
    env = dict(os.environ, TRAJSCALE_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert runs[0]["mda"] and not runs[1]["mda"]
    u = mda.Universe(D.TPR)
    for run in runs:
        assert run["names"] == u.atoms.names[:50].tolist() and run["resids"] == u.atoms.resids[-5:].tolist()
        assert run["ca"] == u.select_atoms("name CA").indices.tolist()
