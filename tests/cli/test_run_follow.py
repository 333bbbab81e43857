"""``trajscale run ANALYSIS TOP TRAJ --follow``: results of a file still being written, rewritten as they
grow, equal to those of the finished file; a killed writer leaves a clean end with every complete frame."""

from __future__ import annotations

import signal

import numpy as np
from MDAnalysisTests.datafiles import PSF

from tests.conftest import run_cli
from tests.sources.test_follow import mda_rmsd, producer


def test_follow_writes_the_results_of_the_finished_file(tmp_path):
    traj, out, report = tmp_path / "growing.h5md", tmp_path / "follow.csv", tmp_path / "follow.json"
    writer = producer("h5md", str(traj), "0.02")
    try:
        proc = run_cli("run", "rmsd", PSF, str(traj), "--follow", "--every-frames", "10", "--idle", "120",
                       "--executor", "processes", "-n", "2", "--out", str(out), "--report", str(report))
    finally:
        assert writer.wait(timeout=300) == 0
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "followed 98 frames; ended: the writer marked the file complete"
    full = tmp_path / "full.csv"
    assert run_cli("run", "rmsd", PSF, str(traj), "--executor", "serial", "--out", str(full)).returncode == 0
    got, ref = np.loadtxt(out, delimiter=",", skiprows=1), np.loadtxt(full, delimiter=",", skiprows=1)
    assert got.shape == (98, 3) and np.array_equal(got, ref)
    np.testing.assert_allclose(got[:, 2], mda_rmsd(PSF, str(traj)), rtol=1e-5, atol=1e-5)
    assert report.exists()


def test_killed_writer_ends_after_idle_with_every_complete_frame(tmp_path):
    traj, out = tmp_path / "killed.h5md", tmp_path / "rmsd.csv"
    writer = producer("h5md", str(traj), "0.02", "30")
    try:
        for line in writer.stdout:
            if line.split() == ["wrote", "30"]:
                break
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
        proc = run_cli("run", "rmsd", PSF, str(traj), "--follow", "--idle", "3", "--executor", "serial",
                       "--out", str(out))
    finally:
        writer.kill()
        writer.wait()
    assert proc.returncode == 0, proc.stderr
    got = np.loadtxt(out, delimiter=",", skiprows=1)
    assert proc.stderr.strip().splitlines()[-1] == f"followed {len(got)} frames; ended: no new frame for 3 s"
    full = tmp_path / "full.csv"
    assert run_cli("run", "rmsd", PSF, str(traj), "--executor", "serial", "--out", str(full)).returncode == 0
    assert len(got) >= 29 and np.array_equal(got, np.loadtxt(full, delimiter=",", skiprows=1))


def test_follow_refuses_a_frame_range(tmp_path):
    proc = run_cli("run", "rmsd", PSF, str(tmp_path / "x.h5md"), "--follow", "--start", "5")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--start, --stop and --step do not apply" in proc.stderr
