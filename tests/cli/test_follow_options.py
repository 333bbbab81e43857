"""Options that would do nothing in their context are refused in one line saying why, before any work;
``inspect --follow`` follows what ``run --follow`` follows and ends as it does."""

from __future__ import annotations

import time
import warnings

import pytest
from MDAnalysisTests.datafiles import DCD, PSF

from tests.cli._helpers import assert_clean_failure
from tests.conftest import run_cli_here
from tests.sources.test_follow_endings import write_xtc
from trajscale.endings import Ending

warnings.filterwarnings("ignore", module="MDAnalysis")

pytestmark = pytest.mark.cli


@pytest.mark.parametrize(("args", "said"), [
    (["run", "rmsd", PSF, "T.xtc", "--tee", "keep.h5md"], "--tee keeps the frames of an imd://HOST:PORT stream"),
    (["run", "rmsd", PSF, "T.xtc", "--every-frames", "5"], "--every-frames: for --follow"),
    (["run", "rmsd", PSF, DCD, "--follow", "--idle", "60"], "DCD files are read whole"),
    (["run", "rmsd", PSF, DCD, "--executor", "serial", "--collective"], "--collective: for --executor mpi"),
    (["inspect", "T.xtc", "--idle", "5"], "--idle: for --follow"),
    (["run", "rmsd", PSF, "T.xtc", "--follow", "--strict"], "--strict refuses a finished XTC/TRR"),
])
def test_an_option_that_would_do_nothing_is_refused(tmp_path, args, said):
    write_xtc(tmp_path / "T.xtc", slice(0, 3))
    t0 = time.monotonic()
    proc = run_cli_here(*[str(tmp_path / a) if a == "T.xtc" else a for a in args], cwd=tmp_path)
    assert_clean_failure(proc, said)
    assert time.monotonic() - t0 < 50   # at once: not after --idle
    assert not (tmp_path / "keep.h5md").exists()


def test_inspect_follows_an_xtc_to_its_end(tmp_path):
    """A finished XTC (``TRAJ.done``), and one whose writer stopped inside a frame: the whole frames are
    counted, the last line says how it ended, the exit status is ``run --follow``'s."""
    done, torn = tmp_path / "done.xtc", tmp_path / "torn.xtc"
    write_xtc(done, slice(0, 5))
    (tmp_path / "done.xtc.done").touch()
    write_xtc(torn, slice(0, 4), done.read_bytes()[:40])
    proc = run_cli_here("inspect", str(done), "--follow", "--idle", "60")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{done}: 5 complete frames"]
    assert proc.stderr.strip().splitlines()[-1] == (f"{done}: 5 complete frames; ended: the writer marked the "
                                                     "file complete")
    proc = run_cli_here("inspect", str(torn), "--follow", "--idle", "2")
    assert proc.returncode == Ending.IDLE.status, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"{torn}: 4 complete frames; ended: no new frame for 2 s; the file was never marked complete, and its "
        "last 40 bytes are not a whole frame (a writer that stopped inside frame 4)")
