"""MPI ranks read only their own frames' box/time/step; rank 0's progress counts every rank's tasks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

from tests.conftest import run_mpi

pytestmark = pytest.mark.mpi

SCRIPT = str(Path(__file__).with_name("mpi_meta_script.py"))


def test_ranks_read_their_own_metadata_and_progress_counts_all(tmp_path, adk_vacuum, adk_vacuum_h5md):
    out = tmp_path / "meta.json"
    proc = run_mpi(2, [SCRIPT, adk_vacuum[0], adk_vacuum_h5md, "--out", str(out), "--tasks", "8"])
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    want = rms.RMSD(mda.Universe(*adk_vacuum), select="name CA").run().results.rmsd[:, 2]
    np.testing.assert_allclose(got["rmsd"], want, atol=1e-4)
    n_frames = len(want)
    # rank 0 also reads two single frames (the first, the reference) while preparing the job;
    # no rank reads the whole file's
    per_rank = [sum(b - a for a, b in reads) for reads in got["reads"]]
    assert sum(per_rank) <= n_frames + 2, got["reads"]
    assert all(0 < n < n_frames for n in per_rank), got["reads"]
    # one line per tenth, counting both ranks' tasks (8 in all), not rank 0's 4
    lines = re.findall(r"tasks \(all ranks\): (\d+)% \((\d+)/(\d+)", proc.stderr)
    assert lines and {int(t) for _, _, t in lines} == {8}, proc.stderr
    assert [int(d) for _, d, _ in lines][-1] == 8
    assert [int(d) for _, d, _ in lines] == sorted(int(d) for _, d, _ in lines)
