"""A writer killed with SIGKILL mid-run: every complete frame readable, ``repair`` makes MDAnalysis read it."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from MDAnalysis.coordinates.H5MD import H5MDReader

from tests.conftest import kill_and_reap, mpiexec, run_cli
from trajscale.sources import H5MDSource

pytest.importorskip("mpi4py")
pytestmark = pytest.mark.mpi

SCRIPT = str(Path(__file__).with_name("pwrite_script.py"))
N_ATOMS = 200_000


def expected(i: int) -> np.ndarray:
    """Frame i as the script writes it (global order)."""
    base = np.random.default_rng(5).random((N_ATOMS, 3), dtype=np.float32) * 100
    return base + np.float32(i)


def kill_mid_run(n: int, out: Path, strategy: str, after: int = 3) -> int:
    """Start the writer on n ranks, SIGKILL every rank once ``after`` frames are committed."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([mpiexec(), "-n", str(n), sys.executable, SCRIPT, "kill", str(out), strategy],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    pids, committed = [], 0
    watchdog = threading.Timer(240, proc.terminate)   # a hung writer fails the test, not the suite
    watchdog.start()
    try:
        for line in proc.stdout:
            pids += [int(p) for p in re.findall(r"pid (\d+)", line)]   # ranks' lines may interleave
            done = re.findall(r"committed (\d+)", line)
            if done:
                committed = int(done[-1])
                if committed >= after and len(pids) == n:
                    time.sleep(0.05)   # into the next frame's data
                    break
    finally:   # the ranks this test started, by their own pids
        watchdog.cancel()
        kill_and_reap(proc, pids)
    assert committed >= after, proc.stderr.read()[-2000:]
    return committed


@pytest.mark.parametrize("n,strategy", [(1, "collective"), (2, "collective"), (3, "independent"), (2, "gather")])
def test_killed_writer_leaves_complete_frames_and_repair(tmp_path, caplog, n, strategy):
    out = tmp_path / "killed.h5md"
    committed = kill_mid_run(n, out, strategy)
    assert out.exists()
    with h5py.File(out, "r") as f:
        n_value, n_step, n_time = (f[f"particles/all/position/{k}"].shape[0] for k in ("value", "step", "time"))
    # every commit is in the file when write() returns (publish); the kill may fall between the
    # growing of step and of time, whose extents HDF5 writes in no set order
    complete = min(n_step, n_time)
    assert complete >= committed
    # rows reserved / partly written beyond the last complete frame, unless the kill fell between frames
    partial = max(n_value, n_step, n_time) > complete
    n_step = complete
    caplog.set_level(logging.WARNING)
    src = H5MDSource(str(out))
    try:
        assert src.n_frames == n_step
        block = src.read(0, n_step)
    finally:
        src.close()
    assert ("ignored" in caplog.text and "trajscale repair" in caplog.text) or not partial
    for i in range(n_step):
        np.testing.assert_array_equal(block.positions[i], expected(i))
    np.testing.assert_array_equal(block.step, np.arange(n_step))
    # MDAnalysis counts frames from value's length: the partial rows break it until repaired
    proc = run_cli("repair", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"kept {n_step} complete frames" in proc.stdout if partial else "nothing to repair" in proc.stdout
    r = H5MDReader(str(out))
    try:
        assert r.n_frames == n_step
        for i, ts in enumerate(r):
            np.testing.assert_array_equal(ts.positions, expected(i))
            assert ts.data["step"] == i
    finally:
        r.close()
    assert not list(tmp_path.glob(".*tmp*"))
    proc = run_cli("repair", str(out))   # idempotent
    assert proc.returncode == 0 and "nothing to repair" in proc.stdout


def test_live_reader_sees_only_complete_frames(tmp_path):
    """``inspect --follow``'s reader, polling while 2 ranks write: every frame it counts is whole."""
    from tests.support.follow import follow

    out = tmp_path / "live.h5md"
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([mpiexec(), "-n", "2", sys.executable, SCRIPT, "kill", str(out), "collective"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    watchdog = threading.Timer(240, proc.terminate)
    watchdog.start()
    seen = []
    try:
        for n in follow(str(out), interval=0.1, idle=120):
            with h5py.File(out, "r", locking=False) as f:
                g = f["particles/all/position"]
                assert g["step"].shape[0] >= n
                for i in range(n):   # every counted frame holds its data, not the fill value
                    np.testing.assert_array_equal(g["value"][i], expected(i))
            seen.append(n)
            if n >= 4:
                break
    finally:
        watchdog.cancel()
        proc.terminate()   # SIGTERM to mpiexec ends both ranks
        proc.wait(timeout=60)
    assert seen and seen[-1] >= 4 and seen == sorted(seen)
