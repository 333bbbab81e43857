"""An ensemble under ``mpiexec -n 2``: each trajectory as MDAnalysis computes it, and each rank opens only the
trajectories of its own tasks (not every rank every file)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_mpi
from tests.ensemble.conftest import universe


@pytest.mark.mpi
def test_two_ranks(replicas, tmp_path):
    import pyarrow.parquet as pq
    from MDAnalysis.analysis.rms import RMSD

    (tmp_path / "plan.toml").write_text(f'[rmsd]\nselect = "name CA"\nout = "{tmp_path / "rmsd.parquet"}"\n\n'
                                        f'[rmsf]\nselect = "name CA"\nout = "{tmp_path / "rmsf.nc"}"\n')
    got = run_mpi(2, ["-m", "trajscale.cli.main", "run", "--plan", str(tmp_path / "plan.toml"), "--ensemble",
                      replicas["catalog"], "--executor", "mpi", "--results", str(tmp_path / "res"),
                      "--report", str(tmp_path / "report.json")], cwd=tmp_path)
    assert got.returncode == 0, got.stderr + got.stdout
    table = pq.read_table(tmp_path / "rmsd.parquet").to_pandas()
    import xarray as xr

    rmsf = xr.open_dataset(tmp_path / "rmsf.nc")
    for name, (top, xtc, _) in replicas["members"].items():
        u = universe(top, xtc)
        ref = RMSD(u, select="name CA").run().results.rmsd[:, 2]
        np.testing.assert_allclose(table[table.trajectory == name]["rmsd"].to_numpy(), ref, atol=1e-4)
        from MDAnalysis.analysis.rms import RMSF

        ca = u.select_atoms("name CA")
        row = rmsf.sel(trajectory=name)
        np.testing.assert_allclose(row["rmsf"].values[:len(ca)], RMSF(ca).run().results.rmsf, atol=1e-4)
    rmsf.close()
    report = json.loads((tmp_path / "report.json").read_text())
    opened: dict[str, int] = {}   # (an ensemble's tasks count the members they open; they list none)
    for t in report["tasks"]:
        opened[t["worker"]] = opened.get(t["worker"], 0) + t["files_opened"]
    assert set(opened) == {"rank 0", "rank 1"}
    assert sum(opened.values()) >= 5 and all(0 < n < 5 for n in opened.values()), opened   # no rank opened all
    assert report["ensemble"]["n_finished"] == 5 and len(report["ensemble"]["slowest"]) == 5
