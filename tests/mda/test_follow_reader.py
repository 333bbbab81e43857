"""``mda.Universe(top, growing, format="TRAJSCALE", follow=True)``: iterating waits for frames a writer
(another process) is adding and stops at the writer's end; every frame equals MDAnalysis's own reading
of the finished file."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import DCD, PSF, TPR, XTC

import trajscale.mda  # noqa: F401 - registers the TRAJSCALE format
from tests.sources.test_follow import producer

pytestmark = pytest.mark.cli

warnings.filterwarnings("ignore", module="MDAnalysis")


def followed_rmsd(top: str, path: str, go: Path | None = None, **kw) -> tuple[np.ndarray, int]:
    """Per-frame CA RMSD to frame 0 after superposition, computed while iterating the growing file
    (``go``: created once the file is open, so that a held writer carries on)."""
    u = mda.Universe(top, path, format="TRAJSCALE", follow=True, poll=0.05, **kw)
    ca = u.select_atoms("name CA")
    at_open = len(u.trajectory)
    if go is not None:
        go.touch()
    ref = None
    out = []
    for _ts in u.trajectory:
        if ref is None:
            ref = ca.positions.copy()
        out.append(rms.rmsd(ca.positions, ref, center=True, superposition=True))
    return np.array(out), at_open


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["h5md", "xtc"])
def test_iteration_follows_the_writer_to_its_end(tmp_path, kind):
    go = tmp_path / "go"   # the XTC writer waits after 10 pieces until the reader has opened the file
    if kind == "h5md":   # (not held: the H5MD writer holds its file's lock while it waits)
        top, src, path = PSF, DCD, tmp_path / "growing.h5md"
        writer = producer("h5md", str(path), "0.1")
    else:
        top, src, path = TPR, XTC, tmp_path / "growing.xtc"
        writer = producer("xtc", XTC, str(path), "0.2", "60000", hold=go)
    try:
        while not path.exists() or path.stat().st_size == 0:   # the reader opens a file with frames
            time.sleep(0.05)
        got, at_open = followed_rmsd(top, str(path), go=go, idle=120)
    finally:
        assert writer.wait(timeout=300) == 0
    u = mda.Universe(top, src)
    ref = rms.RMSD(u.select_atoms("name CA")).run().results.rmsd[:, 2]
    if at_open == len(ref):   # a machine so loaded that the writer finished before the reader opened
        pytest.skip(f"the writer wrote all {at_open} frames before the reader opened the file: nothing followed")
    assert at_open < len(ref)   # the file was still growing when iteration began
    assert len(got) == len(ref)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_iteration_ends_after_idle_when_the_writer_dies(tmp_path):
    import signal

    path = tmp_path / "killed.h5md"
    writer = producer("h5md", str(path), "0.02", "20")
    try:
        for line in writer.stdout:
            if line.split() == ["wrote", "20"]:
                break
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
        got, _ = followed_rmsd(PSF, str(path), idle=2)
    finally:
        writer.kill()
        writer.wait()
    complete = len(mda.Universe(PSF, str(path), format="TRAJSCALE").trajectory)
    assert len(got) == complete >= 19
    ref = rms.RMSD(mda.Universe(PSF, DCD).select_atoms("name CA")).run().results.rmsd[:complete, 2]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
