"""Jobs that reach their ``--time``, ended by the local SLURM itself: SIGTERM to every process of the job,
SIGKILL ``KillWait`` (5 s here) later.

SLURM counts time limits in whole minutes and looks at them about every 30 s, so a ``--time=1`` job ends
60 to 90 s after it starts: both jobs are submitted together, once for the module, and idle while they
wait (a convert slowed by a test hook that sleeps between slabs; a follower waiting for frames that never
come). xdist runs this module beside the others (tests/tiers.py hands the SLURM modules out first).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

from tests.slurm.test_jobs import assert_clean_size, assert_same_frames, frames_done, trajscale

pytestmark = [pytest.mark.slurm, pytest.mark.cli, pytest.mark.slow]

#: One DCD frame per slab and 1.5 s idle before each: 98 frames take ~150 s, far past the limit, and each
#: pause is well under KillWait, so the convert sees the SIGTERM between two slabs and saves its partial.
SLOWER_CONVERT = {"TRAJSCALE_CONVERT_SLAB_MB": "0.04", "TRAJSCALE_TEST_SLOW_READ": "1.5"}

#: At the limit SLURM sends SIGTERM to every process of the job, the batch shell too. A shell without a trap
#: dies at once, and slurmstepd then SIGKILLs what is left of the step (the command, in the middle of its
#: save); with a trap, the shell waits for its foreground command, which saves and exits (docs/cluster.md).
WAIT_ON_TERM = "trap 'echo job: SIGTERM' TERM\n"


@pytest.fixture(scope="module")
def timed_out(slurm, tmp_path_factory):
    """Two ``--time=1`` jobs, submitted at once and waited for together: a convert and a follower."""
    convert_dir = tmp_path_factory.mktemp("limit-convert")
    follow_dir = tmp_path_factory.mktemp("limit-follow")
    shutil.copy(D.XTC, follow_dir / "md.xtc")   # a trajectory nobody marks complete (no md.xtc.done)
    jobs = {
        "convert": (convert_dir, slurm.sbatch(
            "#!/bin/bash\n" + WAIT_ON_TERM +
            f"trajscale convert {D.PSF} {D.DCD} -o out.h5md --resume --no-progress\n"
            "echo convert exited $?\n", "--time=1", "-o", "job.log", cwd=convert_dir, env=SLOWER_CONVERT)),
        "follow": (follow_dir, slurm.sbatch(
            "#!/bin/bash\n" + WAIT_ON_TERM +
            f"{sys.executable} -m trajscale.cli.main run rmsd {D.TPR} md.xtc --select 'name CA' --follow "
            "--idle 600 --every 5 --out rmsd.csv\n"
            "echo follow exited $?\n", "--time=1", "-o", "job.log", cwd=follow_dir)),
    }
    states = {name: slurm.wait(job, timeout=240) for name, (_, job) in jobs.items()}
    return {name: (folder, job, states[name], (folder / "job.log").read_text()) for name, (folder, job) in jobs.items()}


def test_a_convert_at_its_time_limit_keeps_a_partial_that_resume_finishes(slurm, timed_out):
    folder, job, state, log = timed_out["convert"]
    assert state == "TIMEOUT", log
    assert "DUE TO TIME LIMIT" in log and "job: SIGTERM" in log, log
    assert "convert exited 143" in log, log
    assert 0 < frames_done(folder) < 98, log
    said = [line for line in log.splitlines() if line.startswith("trajscale convert:")]
    assert len(said) == 1 and "terminated by signal 15" in said[0] and "--resume" in said[0], log
    assert not (folder / "out.h5md").exists()
    again = trajscale(slurm, "convert", D.PSF, D.DCD, "-o", "out.h5md", "--resume", "--no-progress", cwd=folder)
    assert again.returncode == 0, again.stderr
    assert "resuming out.h5md from frame" in again.stderr, again.stderr
    assert_same_frames(folder / "out.h5md", D.PSF, D.DCD)
    assert_clean_size(slurm, folder / "out.h5md", folder)


def test_a_follower_at_its_time_limit_saves_what_it_analysed(timed_out):
    folder, job, state, log = timed_out["follow"]
    assert state == "TIMEOUT", log
    assert "DUE TO TIME LIMIT" in log and "follow exited 143" in log, log
    assert "interrupted; the results cover every frame analysed so far" in log, log
    table = np.loadtxt(Path(folder) / "rmsd.csv", delimiter=",", skiprows=1)
    ref = rms.RMSD(mda.Universe(D.TPR, D.XTC), select="name CA").run().results.rmsd
    assert table.shape[0] == len(ref)
    np.testing.assert_allclose(table[:, -1], ref[:, 2], atol=1e-4)
