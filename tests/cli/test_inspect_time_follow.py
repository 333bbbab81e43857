"""``inspect`` prints the time range and dt; ``inspect --follow`` on a file still being written does not
call it interrupted nor advise ``repair``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import MDAnalysis as mda
import pytest

from tests.conftest import run_cli_here
from trajscale.endings import Ending

pytestmark = pytest.mark.cli

warnings.filterwarnings("ignore", module="MDAnalysis")


def test_inspect_prints_time_range_and_dt_as_mdanalysis_reads_them(adk_vacuum, adk_vacuum_h5md):
    u = mda.Universe(*adk_vacuum)
    first, last, dt = u.trajectory[0].time, u.trajectory[-1].time, u.trajectory.dt
    proc = run_cli_here("inspect", adk_vacuum_h5md)
    assert proc.returncode == 0, proc.stderr
    assert f"time          {first:g} - {last:g} ps, dt {dt:.6g} ps" in proc.stdout, proc.stdout
    facts = json.loads(run_cli_here("inspect", adk_vacuum_h5md, "--json").stdout)["time"]
    assert facts["first"] == pytest.approx(first, rel=1e-6) and facts["last"] == pytest.approx(last, rel=1e-6)
    assert facts["dt"] == pytest.approx(dt, rel=1e-6) and facts["even"]


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from trajscale.pwrite import ParallelWriter

    n_atoms = 50
    w = ParallelWriter(sys.argv[1], n_atoms, n_frames=20, velocities=False)   # rows reserved for 20 frames
    ids = np.arange(n_atoms)
    for k in range(3):
        w.write(step=10 * k, time=2.0 * k, ids=ids, positions=np.full((n_atoms, 3), k, np.float32),
                box=[30, 30, 30, 90, 90, 90])
    print("written", flush=True)
    sys.stdin.read()   # open and mid-write until the test closes our stdin
    w.close()
""")


def test_follow_on_a_file_being_written_is_not_called_interrupted(tmp_path):
    path = tmp_path / "live.h5md"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "written"
        proc = run_cli_here("inspect", str(path), "--follow", "--idle", "2")
        out = proc.stdout + proc.stderr
        assert proc.returncode == Ending.IDLE.status, out   # the writer never closed the file
        assert proc.stderr.strip().splitlines()[-1].endswith(
            "complete frames; ended: no new frame for 2 s; the file was never marked complete"), out
        # (a frame's step shows from the next frame's flush on: 2 or 3 of the 3 written)
        assert f"{path}: 2 complete frames" in proc.stdout or f"{path}: 3 complete frames" in proc.stdout, out
        assert "interrupted" not in out and "repair" not in out, out
    finally:
        writer.stdin.close()
        writer.wait(timeout=60)
    assert writer.returncode == 0
