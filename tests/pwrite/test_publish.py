"""A frame ``ParallelWriter.write()`` has returned is in the file: a follower sees it while the producer
waits, and a producer killed with SIGKILL leaves it (serial and under ``mpiexec -n 2``)."""

from __future__ import annotations

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

from tests.conftest import kill_and_reap, mpiexec
from tests.pwrite.publish_script import frame
from tests.support.follow import complete_frames

SCRIPT = str(Path(__file__).with_name("publish_script.py"))
#: How long a follower may take to see a written frame. Publishing is one flush when the write returns,
#: so the frame is there at the first look; the bound only has to hold on a loaded machine (without
#: publishing the frame never shows until the next write, which never comes here).
SEEN_WITHIN_S = 30.0


def produce_and_kill(out: Path, n: int, mpi: bool, extra: tuple[str, ...] = (),
                     bound: float = SEEN_WITHIN_S) -> tuple[int | None, float]:
    """Start the producer, wait for its ``n`` writes, look at the file as a follower does until it counts
    ``n`` frames (or the bound passes), SIGKILL every producer process; the count seen and how long it took."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, SCRIPT, str(out), str(n), *(["mpi"] if mpi else []), *extra]
    if mpi:
        cmd = [mpiexec(), "-n", "2", *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(300, proc.kill)   # a hung producer fails the test, not the suite
    watchdog.start()
    pids, seen, waited = [], None, float("inf")
    try:
        for line in proc.stdout:
            pids += [int(p) for p in re.findall(r"pid (\d+)", line)]
            if "waiting" in line:
                break
        assert len(pids) == (2 if mpi else 1), proc.stderr.read()[-2000:]
        t0 = time.monotonic()
        while time.monotonic() - t0 < bound:
            seen = complete_frames(str(out))
            if seen == n:
                waited = time.monotonic() - t0
                break
            time.sleep(0.05)
    finally:   # the ranks this test started, by their own pids
        watchdog.cancel()
        kill_and_reap(proc, pids)
    return seen, waited


def check_frames(out: Path, n: int) -> None:
    """The file a killed producer left: ``n`` frames counted, each equal to what was written."""
    assert complete_frames(str(out)) == n
    with h5py.File(out, "r", locking=False) as f:
        pos = f["particles/all/position/value"][:n]
        np.testing.assert_array_equal(f["particles/all/position/step"][()], np.arange(n))
    for i in range(n):
        np.testing.assert_array_equal(pos[i], frame(i))


@pytest.mark.cli
def test_a_written_frame_is_seen_and_survives_sigkill(tmp_path):
    out = tmp_path / "p.h5md"
    seen, waited = produce_and_kill(out, 8, mpi=False)
    assert seen == 8 and waited < SEEN_WITHIN_S
    check_frames(out, 8)


@pytest.mark.cli
def test_without_publish_the_last_frame_waits_for_the_next_write(tmp_path):
    """``publish=False`` saves a flush per frame, and this is its price: the last write is not in the file."""
    out = tmp_path / "p.h5md"
    seen, _ = produce_and_kill(out, 3, mpi=False, extra=("nopublish",), bound=2.0)
    assert seen == 2
    check_frames(out, 2)


@pytest.mark.mpi
def test_a_written_frame_is_seen_and_survives_sigkill_under_mpi(tmp_path):
    pytest.importorskip("mpi4py")
    out = tmp_path / "p.h5md"
    seen, waited = produce_and_kill(out, 8, mpi=True)
    assert seen == 8 and waited < SEEN_WITHIN_S
    check_frames(out, 8)
