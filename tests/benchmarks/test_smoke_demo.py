"""Smoke runs of the benchmarks against MDAnalysis on the demo file (tests/benchmarks/smoke.py), and
cold.py's whole-process pairs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from .smoke import MODULES, NUM, SMOKE, run_script, smoke

pytestmark = pytest.mark.tool   # runs the benchmarks at their smallest size


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.parametrize("script", MODULES[Path(__file__).stem])
def test_smoke(script, work):
    smoke(script, work)


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

