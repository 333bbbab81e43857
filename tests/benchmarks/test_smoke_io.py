"""Smoke runs of the reading, writing, layout, scaling and remote-client benchmarks (tests/benchmarks/smoke.py),
the MDAnalysis-under-MPI baseline, bare_machine.sh and cold.py's whole-process pairs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from .smoke import BENCH, NUM, SMOKE, F, bench_env, run_script, smoke_test

pytestmark = pytest.mark.tool   # runs the benchmarks at their smallest size

test_smoke = smoke_test(__file__)


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


@pytest.mark.slow
@pytest.mark.mpi
def test_cold_pairs_whole_processes(work):
    """cold.py: the four rows with both sides' medians and a ratio, and the two sides' RMSDs agree."""
    from MDAnalysisTests.datafiles import GRO

    out = run_script(work, "cold.py", SMOKE["cold.py"][0])
    header = r"^run \(whole process\)\s+trajscale s\s+MDAnalysis s\s+ratio\s+range\s+cpu ratio$"
    assert re.search(header, out, re.MULTILINE), out
    rows = re.findall(rf"^(.+?)\s+({NUM})\s+({NUM})\s+({NUM})x\s+({NUM})-({NUM})\s+({NUM})x$", out, re.MULTILINE)
    labels = [r[0] for r in rows]
    assert labels[:3] == ["first run, empty caches (serial)", "serial", "processes(2) vs multiprocessing(2)"], out
    if shutil.which("mpiexec.mpich") or shutil.which("mpiexec"):
        assert labels[3:] == ["mpiexec -n 2 (mpi) vs MDAnalysis serial"], out
    for _, t_ts, t_mda, ratio, lo, hi, cpu in rows:
        assert float(t_ts) > 0 and float(t_mda) > 0 and float(cpu) > 0
        # One pair each, so the ratio is t_mda / t_ts of the unrounded times.  The times are printed
        # rounded to 0.01 s and the ratio to 0.01, so the printed ratio lies within 0.005 of a quotient
        # of two times each within 0.005 s of its printed value (CI printed 0.64 / 0.19 s and 3.27x).
        lo_q = (float(t_mda) - 0.005) / (float(t_ts) + 0.005)
        hi_q = (float(t_mda) + 0.005) / max(float(t_ts) - 0.005, 1e-9)
        assert lo_q - 0.0051 <= float(ratio) <= hi_q + 0.0051, (t_ts, t_mda, ratio)
        assert float(lo) == float(hi) == pytest.approx(float(ratio), abs=0.011)
    diff = re.search(rf"max \|RMSD difference\| ({NUM}) A$", out, re.MULTILINE)
    assert diff and float(diff.group(1)) < 1e-4, out
    # The file it measured: frame-chunked, 20 frames, the GRO's atoms.
    import h5py

    with h5py.File(work / "adk_20_framechunks.h5md", "r") as f:
        pos = f["particles/all/position/value"]
        assert pos.shape[:2] == (20, 47681) and pos.chunks[0] == 1
    import MDAnalysis as mda

    assert mda.Universe(GRO).atoms.n_atoms == 47681
