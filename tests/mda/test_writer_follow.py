"""``trajscale.mda.Writer(followable=True)``: frames under the output's own name as they are written, the
end marker at close; a killed pipeline's file is followed to its last frame and repaired."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

import trajscale as ts
import trajscale.mda  # noqa: F401
from tests.support.follow import complete_frames
from trajscale.follow import FollowOptions
from trajscale.h5md.writer import COMPLETE_ATTR
from trajscale.pwrite.repair import repair

warnings.filterwarnings("ignore", module="MDAnalysis")
SCRIPT = str(Path(__file__).with_name("followable_writer_script.py"))


def test_followable_writer_marks_the_file_complete_at_close(tmp_path):
    u = mda.Universe(D.PSF, D.DCD)
    out = tmp_path / "f.h5md"
    with mda.Writer(str(out), u.atoms.n_atoms, format="TRAJSCALE", followable=True) as w:
        for _ in u.trajectory[:5]:
            w.write(u.atoms)
    assert sorted(os.listdir(tmp_path)) == ["f.h5md"]
    with h5py.File(out, "r") as f:
        assert f.attrs[COMPLETE_ATTR]
    got = mda.Universe(D.PSF, str(out))
    for t, ref in zip(got.trajectory, u.trajectory[:5], strict=True):
        np.testing.assert_allclose(t.positions, ref.positions, atol=1e-5)


def test_a_failing_pipeline_keeps_the_followable_frames_unmarked(tmp_path):
    u = mda.Universe(D.PSF, D.DCD)
    out = tmp_path / "broken.h5md"
    with pytest.raises(RuntimeError, match="pipeline broke"):
        with mda.Writer(str(out), u.atoms.n_atoms, format="TRAJSCALE", followable=True) as w:
            for t in u.trajectory[:6]:
                w.write(u.atoms)
                if t.frame == 3:
                    raise RuntimeError("pipeline broke")
    assert complete_frames(str(out)) == 4
    with h5py.File(out, "r") as f:
        assert not f.attrs.get(COMPLETE_ATTR, False)   # (made False at the start, made True only at close)


@pytest.mark.cli
def test_a_killed_followable_writer_is_followed_and_repaired(tmp_path):
    """While the writer waits after 5 frames they are under the output's name (a follower counts them); after
    SIGKILL a followed RMSD ends idle with those 5 frames, as MDAnalysis's RMSD of them; ``repair`` then
    lets MDAnalysis's own reader open the file."""
    out = tmp_path / "live.h5md"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, SCRIPT, str(out), "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    watchdog = threading.Timer(300, proc.kill)
    watchdog.start()
    try:
        pid = None
        for line in proc.stdout:
            pid = pid or next((int(p) for p in re.findall(r"pid (\d+)", line)), None)
            if "waiting" in line:
                break
        assert pid is not None, proc.stderr.read()[-2000:]
        assert [p.name for p in tmp_path.iterdir()] == ["live.h5md"]   # no temporary name
        deadline = time.monotonic() + 30
        while complete_frames(str(out)) != 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert complete_frames(str(out)) == 5
        os.kill(pid, signal.SIGKILL)
    finally:
        watchdog.cancel()
        proc.wait(timeout=60)
    r = ts.run(ts.RMSD(select="name CA"), D.PSF, str(out), follow=FollowOptions(idle=2, poll=0.05))
    assert r.report.meta.follow.ended == "idle"
    u = mda.Universe(D.PSF, D.DCD)
    expect = rms.RMSD(u, select="name CA").run(stop=5).results.rmsd[:, 2]
    np.testing.assert_allclose(r.rmsd, expect, atol=1e-4)
    repair(out)
    got = mda.Universe(D.PSF, str(out))
    assert len(got.trajectory) == 5


@pytest.mark.cli
def test_mdanalysis_h5md_writer_is_readable_only_once_released(tmp_path):
    """What docs/following.md says of MDAnalysis's own H5MDWriter: while the writer object exists, even
    after ``close()``, another process cannot open its file; once it is released, every frame is there."""
    import gc

    probe = ("import sys, h5py\ntry:\n    with h5py.File(sys.argv[1], 'r', locking=False) as f:\n"
             "        print(f['particles/trajectory/position/value'].shape[0])\nexcept OSError:\n    print('no')\n")

    def look(path) -> str:
        return subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True,
                              timeout=120).stdout.strip()

    u = mda.Universe(D.PSF, D.DCD)
    out = tmp_path / "mda.h5md"
    w = mda.Writer(str(out), u.atoms.n_atoms, format="H5MD")
    for _ in u.trajectory[:3]:
        w.write(u.atoms)
    assert look(out) == "no"
    w.close()
    assert look(out) == "no"
    del w
    gc.collect()
    assert look(out) == "3"
