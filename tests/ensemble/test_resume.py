"""A run stopped by SIGTERM keeps every trajectory it saved; ``--resume`` skips them and ends with the outputs
of a run that was never stopped."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import run_cli
from trajscale.ensemble.saved import saved_names


@pytest.fixture
def twelve(replicas, tmp_path):
    """Twelve AdK trajectories (the three replicas four times over), one catalog."""
    from MDAnalysisTests.datafiles import PSF

    lines = ["name,topology,trajectory,copy"]
    for k in range(4):
        for name in ("adk-0", "adk-1", "adk-2"):
            shutil.copy(replicas["members"][name][1], tmp_path / f"{name}-{k}.xtc")
            lines.append(f"{name}-{k},{PSF},{name}-{k}.xtc,{k}")
    (tmp_path / "twelve.csv").write_text("\n".join(lines) + "\n")
    return tmp_path / "twelve.csv"


def _command(catalog, results, out) -> list[str]:
    return ["run", "--plan", str(catalog.parent / "plan.toml"), "--ensemble", str(catalog), "--results",
            str(results), "--executor", "serial", "--round-size", "2", "-q"]


@pytest.mark.cli
@pytest.mark.slow(seconds=8)
def test_resume_after_sigterm_ends_as_a_run_never_stopped(twelve, tmp_path):
    import pyarrow.parquet as pq

    def plan(out: str) -> None:
        (tmp_path / "plan.toml").write_text(f'[rmsd]\nselect = "name CA"\nout = "{out}.parquet"\n\n'
                                            f'[rmsf]\nselect = "name CA"\nout = "{out}.nc"\n')

    plan(str(tmp_path / "whole"))
    whole = run_cli(*_command(twelve, tmp_path / "whole-res", None), cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr

    plan(str(tmp_path / "resumed"))
    env = {**os.environ, "TRAJSCALE_TEST_SLOW_READ": "0.4"}   # each block's read sleeps: time to stop it midway
    proc = subprocess.Popen([sys.executable, "-m", "trajscale.cli.main", *_command(twelve, tmp_path / "res", None)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    saved = tmp_path / "res" / "trajectories"
    end = time.monotonic() + 120
    while time.monotonic() < end and proc.poll() is None:
        if len(saved_names(tmp_path / "res")) >= 4:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "(--resume goes on from them)" in err and "no partial output" not in err, err
    kept = sorted(os.listdir(saved))   # (files: small rounds gather into one file)
    names = saved_names(tmp_path / "res")
    assert 4 <= len(names) < 12 and not [f for f in kept if ".tmp-" in f]
    assert not (tmp_path / "resumed.parquet").exists()
    stamps = {f: os.stat(saved / f).st_mtime_ns for f in kept}

    again = run_cli(*_command(twelve, tmp_path / "res", None), "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert sorted(saved_names(tmp_path / "res")) == sorted(f"{n}-{k}" for k in range(4)
                                                            for n in ("adk-0", "adk-1", "adk-2"))
    a, b = pq.read_table(tmp_path / "whole.parquet"), pq.read_table(tmp_path / "resumed.parquet")
    assert a.equals(b) and a.num_rows == 4 * (30 + 20 + 48)
    import xarray as xr

    with xr.open_dataset(tmp_path / "whole.nc") as x, xr.open_dataset(tmp_path / "resumed.nc") as y:
        assert x.identical(y)
    # the trajectories saved before the stop were skipped: their files were not written again
    assert {f: os.stat(saved / f).st_mtime_ns for f in kept} == stamps
    assert set(names) <= set(saved_names(tmp_path / "res"))


def test_results_folder_holds_a_file_per_fifty_trajectories_however_small_the_rounds(tmp_path):
    import MDAnalysis as mda
    import numpy as np
    from MDAnalysis.analysis import rms

    import trajscale as ts
    from tests.support.ensembles import tiny_ensemble
    from trajscale.ensemble.saved import saved_names

    n = 100
    catalog, _ = tiny_ensemble(tmp_path / "tiny", n)
    r = ts.run(ts.RMSD(select="all"), str(catalog), executor="serial", results=tmp_path / "res", round_size=2)
    files = os.listdir(tmp_path / "res" / "trajectories")
    assert len(files) <= n // 50, files   # (50 rounds of 2)
    assert sorted(saved_names(tmp_path / "res")) == [f"t{i:05d}" for i in range(n)]
    for name in ("t00000", "t00063", "t00099"):   # read back from the folder, as MDAnalysis computes it
        u = mda.Universe(str(tmp_path / "tiny" / "top.pdb"), str(tmp_path / "tiny" / f"{name}.xtc"))
        np.testing.assert_allclose(r[name].rmsd, rms.RMSD(u, select="all").run().results.rmsd[:, 2], atol=1e-5)
    assert len(r.columns()["rmsd"]) == 2 * n
