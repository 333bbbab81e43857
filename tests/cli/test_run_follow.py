"""``trajscale run ANALYSIS TOP TRAJ --follow``: results of a file still being written, rewritten as they
grow, equal to those of the finished file; a killed writer leaves a clean end with every complete frame."""

from __future__ import annotations

import signal
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests.datafiles import DCD, PSF

from tests.conftest import run_cli, run_cli_here
from tests.sources.test_follow import mda_rmsd, producer
from trajscale.endings import Ending

pytestmark = pytest.mark.cli

warnings.filterwarnings("ignore", module="MDAnalysis")


def _finished_xtc(path, n_frames: int = 5, torn: int = 0) -> None:
    """PSF/DCD's first frames as an XTC written by MDAnalysis, then the first ``torn`` bytes of a frame
    (a writer stopped inside it), then ``path.done``: a finished file that following reads to its end."""
    u = mda.Universe(PSF, DCD)
    with mda.Writer(str(path), u.atoms.n_atoms) as w:
        for _ in u.trajectory[:n_frames]:
            w.write(u.atoms)
    with open(path, "r+b") as f:
        start = f.read(torn)
        f.seek(0, 2)
        f.write(start)
    path.with_name(path.name + ".done").touch()


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_follow_writes_the_results_of_the_finished_file(tmp_path):
    traj, out, report = tmp_path / "growing.h5md", tmp_path / "follow.csv", tmp_path / "follow.json"
    # a frame every 0.05 s: a worker's open on a loaded machine spans fewer of the writer's flushes
    writer = producer("h5md", str(traj), "0.05")
    try:
        proc = run_cli("run", "rmsd", PSF, str(traj), "--follow", "--every-frames", "10", "--idle", "120",
                       "--executor", "processes", "-n", "2", "--out", str(out), "--report", str(report))
    finally:
        assert writer.wait(timeout=300) == 0
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "followed 98 frames; ended: the writer marked the file complete"
    full = tmp_path / "full.csv"
    assert run_cli_here("run", "rmsd", PSF, str(traj), "--executor", "serial", "--out", str(full)).returncode == 0
    got, ref = np.loadtxt(out, delimiter=",", skiprows=1), np.loadtxt(full, delimiter=",", skiprows=1)
    assert got.shape == (98, 3) and np.array_equal(got, ref)
    np.testing.assert_allclose(got[:, 2], mda_rmsd(PSF, str(traj)), rtol=1e-5, atol=1e-5)
    assert report.exists()


@pytest.mark.slow
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
    assert proc.returncode == Ending.IDLE.status, proc.stderr   # never marked complete: not status 0
    got = np.loadtxt(out, delimiter=",", skiprows=1)
    assert proc.stderr.strip().splitlines()[-1] == (f"followed {len(got)} frames; ended: no new frame for 3 s; "
                                                     "the file was never marked complete")
    full = tmp_path / "full.csv"
    assert run_cli_here("run", "rmsd", PSF, str(traj), "--executor", "serial", "--out", str(full)).returncode == 0
    assert len(got) >= 29 and np.array_equal(got, np.loadtxt(full, delimiter=",", skiprows=1))


def test_follow_refuses_a_frame_range(tmp_path):
    proc = run_cli_here("run", "rmsd", PSF, str(tmp_path / "x.h5md"), "--follow", "--start", "5")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--start, --stop and --step do not apply" in proc.stderr


def test_followed_rmsd_says_its_selection_once_as_a_run_that_is_not_followed(tmp_path):
    traj = tmp_path / "done.xtc"
    _finished_xtc(traj)
    plain = run_cli_here("run", "rmsd", PSF, str(traj), "--executor", "serial")   # (followed: in a process)
    followed = run_cli("run", "rmsd", PSF, str(traj), "--follow", "--idle", "120", "--executor", "serial")
    assert plain.returncode == 0 and followed.returncode == 0, plain.stderr + followed.stderr
    said = [ln for ln in plain.stdout.splitlines() if ln.startswith("selection:")]
    assert said == ["selection: 'protein and name CA' (the default; --select to change)"]
    assert [ln for ln in followed.stdout.splitlines() if ln.startswith("selection:")] == said
    assert followed.stdout.splitlines()[0] == said[0]   # before the summary, as in a run not followed
    assert followed.stderr.strip().splitlines()[-1] == ("followed 5 frames; ended: the writer marked "
                                                         "the file complete")


def test_a_finished_xtc_ending_inside_a_frame_is_warned_about_once(tmp_path):
    traj = tmp_path / "torn.xtc"
    _finished_xtc(traj, torn=40)
    out = tmp_path / "rmsd.csv"
    proc = run_cli("run", "rmsd", PSF, str(traj), "--follow", "--idle", "120", "--executor", "serial",
                   "--every-frames", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "are not a whole frame" in ln]
    assert len(warned) == 1, proc.stderr
    assert f"{traj}: marked finished, but its last 40 bytes" in warned[0]
    whole = tmp_path / "whole.xtc"   # the same frames without the torn end, as MDAnalysis reads them
    _finished_xtc(whole)
    ref = mda_rmsd(PSF, str(whole))
    np.testing.assert_allclose(np.loadtxt(out, delimiter=",", skiprows=1)[:, 2], ref, rtol=1e-5, atol=1e-5)
