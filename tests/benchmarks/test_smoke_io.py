"""Smoke runs of the reading, writing, layout and scaling benchmarks (tests/benchmarks/smoke.py), the
MDAnalysis-under-MPI baseline and bare_machine.sh."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .smoke import BENCH, MODULES, NUM, SMOKE, F, bench_env, smoke

pytestmark = pytest.mark.tool   # runs the benchmarks at their smallest size


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.parametrize("script", MODULES[Path(__file__).stem])
def test_smoke(script, work):
    smoke(script, work)


@pytest.mark.mpi
def test_mda_mpi_baseline(work):
    """The MDAnalysis-under-MPI baseline: a 2-rank job writes the RMSDs MDAnalysis's own RMSD gives."""
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms
    from MDAnalysisTests.datafiles import TPR

    from trajscale.demo import build_demo_file

    from ..conftest import run_mpi

    top, h5 = build_demo_file(work, int(F), progress=False)
    assert top == TPR
    out = work / "baseline.json"
    proc = run_mpi(2, [str(BENCH / "mda_mpi_baseline.py"), top, h5, "--driver", "default", "--out", str(out)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(out.read_text())
    assert res["n_ranks"] == 2 and res["n_frames"] == 20 and len(res["workers"]) == 2
    ref = rms.RMSD(mda.Universe(top, h5), select="protein and name CA").run().results.rmsd[:, 2]
    np.testing.assert_allclose(res["rmsd_first"], ref[:5], atol=1e-4)
    assert res["rmsd_mean"] == pytest.approx(ref.mean(), abs=1e-4)


@pytest.mark.slow
@pytest.mark.mpi
def test_bare_machine(work, tmp_path):
    """bare_machine.sh runs read_layouts.py from AdK's TPR/XTC (given with --source); it passes --mpiexec only
    to a script that has that option (read_layouts.py has not: it used to exit 2 on it)."""
    from MDAnalysisTests import datafiles as D

    devdata, wheels = tmp_path / "devdata", tmp_path / "wheels"
    devdata.mkdir()
    wheels.mkdir()
    (devdata / "adk_oplsaa.tpr").symlink_to(D.TPR)
    (devdata / "adk_oplsaa.xtc").symlink_to(D.XTC)
    env = dict(bench_env(work), WHEELS=str(wheels), DEVDATA=str(devdata), PFX=str(tmp_path / "pfx"),
               MPIEXEC=shutil.which("mpiexec.mpich") or "mpiexec",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    args = [a.replace("{work}", str(tmp_path)) for a in SMOKE["read_layouts.py"][0]]
    proc = subprocess.run(["bash", str(BENCH / "bare_machine.sh"), "benchmarks/read_layouts.py", *args],
                          check=False, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(rf"^frame\s+\(1, 47681, 3\)\s+{NUM}", proc.stdout, re.MULTILINE), proc.stdout
    assert (tmp_path / "adk_20.h5md").exists()   # built from the --source files

