"""``trajscale run ... --follow --out X`` stopped by Ctrl-C or SIGTERM while a writer keeps writing: the results so
far are in X (whole), the last line says how many frames they cover, and the exit status is 128 + the signal."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import PSF

from tests.conftest import ROOT
from tests.sources.test_follow import producer

pytestmark = pytest.mark.cli

warnings.filterwarnings("ignore", module="MDAnalysis")


@pytest.mark.parametrize(("sig", "executor", "whole_group"), [(signal.SIGINT, "processes", True),
                                                              (signal.SIGTERM, "serial", False)])
def test_a_stopped_follow_saves_the_results_so_far(tmp_path, sig, executor, whole_group):
    """Ctrl-C at a terminal signals the whole process group (workers too); SIGTERM (a batch system) the
    command alone."""
    traj, out = tmp_path / "growing.xtc", tmp_path / "rmsd.csv"
    writer = producer("mdaxtc", str(traj), "0.05", "forever")   # writes until SIGTERM
    try:
        proc = subprocess.Popen([sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", PSF, str(traj),
                                 "--follow", "--every-frames", "5", "--idle", "300", "--executor", executor,
                                 "-n", "2", "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
        deadline = time.monotonic() + 300
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)   # the first results are out: the run is following
        assert out.exists(), proc.communicate(timeout=60)
        if whole_group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=300)
    finally:
        writer.send_signal(signal.SIGTERM)
        assert writer.wait(timeout=120) == 0
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    said = re.fullmatch(r"followed (\d+) frames; ended: interrupted; the results cover every frame analysed so far",
                        last)
    assert said, stderr
    n = int(said.group(1))
    got = np.loadtxt(out, delimiter=",", skiprows=1, ndmin=2)
    assert n >= 5 and got.shape == (n, 3)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]   # no temporary left beside it
    u = mda.Universe(PSF, str(traj))   # the finished file's first n frames, by MDAnalysis
    ref = rms.RMSD(u.select_atoms("name CA")).run(stop=n).results.rmsd
    np.testing.assert_allclose(got[:, 2], ref[:, 2], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 1], ref[:, 1], rtol=1e-6)   # the times of those frames
