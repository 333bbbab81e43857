"""What a measurement shared its machine with, and its files' page-cache state: real processes, real files.

The busy machine is a real busy loop (``python -c "while True: pass"``) beside the measurement; the
page cache is the kernel's, dropped with ``posix_fadvise(POSIX_FADV_DONTNEED)`` and compared with
util-linux's ``fincore``.  The tests assert that a busy loop is seen; they never assert that a machine
is idle (the machine running them may be shared).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np
import pytest

from trajscale import per_frame
from trajscale.report.conditions import LoadMeter, page_cache

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and mincore are Linux's")


def _drop(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _read(path, nbytes: int) -> None:
    """Read the first ``nbytes`` with readahead off (POSIX_FADV_RANDOM), so no more pages come in."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        os.pread(fd, nbytes, 0)
    finally:
        os.close(fd)


def _fincore_bytes(path) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[0])


@linux
@pytest.mark.cli
def test_page_cache_state_agrees_with_fincore(tmp_path):
    if shutil.which("fincore") is None:
        pytest.skip("util-linux fincore is not installed")
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(8 << 20))
    _drop(path)
    if _fincore_bytes(path) > 0:
        pytest.skip("this file system keeps its pages after POSIX_FADV_DONTNEED")
    assert page_cache([path]).resident == 0.0
    _read(path, 3 << 20)   # the first 3 of 8 MiB
    ref = _fincore_bytes(path) / (8 << 20)
    got = page_cache([path])
    assert not got.sampled and got.bytes == 8 << 20
    assert got.resident == pytest.approx(ref, abs=1 / got.pages)
    assert 3 / 8 <= got.resident < 1
    # sampled: 16 windows of 8 pages over the 2048 pages; each window is wholly in or out but for one
    sampled = page_cache([path], max_pages=128, windows=16)
    assert sampled.sampled and sampled.pages == 128
    assert sampled.resident == pytest.approx(ref, abs=1 / 16 + 1e-9)


#: A busy loop detached from the test: its launcher forks it into a session of its own and exits, so it is
#: not a descendant of the measuring process (whose live descendants count as its own work, as a pool's
#: workers are), but other work on the machine, as another user's would be.
DETACHED_LOOP = """import os
pid = os.fork()
if pid == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        pass
print(pid, flush=True)
"""


@contextmanager
def busy_loop():
    """A real busy loop (``while True: pass``) on one core, running before and after the block; its pid."""
    launcher = subprocess.run([sys.executable, "-c", DETACHED_LOOP], capture_output=True, text=True, check=True,
                              timeout=60)
    pid = int(launcher.stdout.split()[0])
    try:
        time.sleep(0.3)   # it is running before the measurement starts
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@linux
@pytest.mark.cli
def test_a_busy_loop_beside_a_measurement_is_other_work():
    """The loop's own CPU time (from /proc/PID/stat) is counted as other work, and the load is busy."""
    with busy_loop() as pid:
        before = _cpu_s(pid)
        meter = LoadMeter("test")
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            time.sleep(0.05)
        load = meter.stop()
        spent = _cpu_s(pid) - before
    assert load.busy, load.describe()
    assert load.others_s >= spent - 0.1, (load, spent)


@linux
@pytest.mark.cli
def test_a_probe_beside_a_busy_loop_is_marked_and_its_prediction_says_so(tmp_path):
    from tests.report.test_predict import _serial
    from trajscale.report.machine import Machine
    from trajscale.report.predict import fit, format_predictions
    from trajscale.report.probe import ProbeOptions, probe
    from trajscale.report.storage import predict_storage

    with busy_loop():
        m = probe(ProbeOptions(path=str(tmp_path), seconds=1.0, nbytes=8 << 20, block_bytes=1 << 20, starts=False),
                  log=lambda s: None)
    assert m.busy.startswith("probe: other work took"), m.loads
    prof = tmp_path / "busy.json"
    m.write(prof)
    again = Machine.load(prof)   # the mark survives the profile's file
    assert again.busy == m.busy
    model = fit(_serial(), "processes", ran_on=again)
    text = format_predictions(model, predict_storage(model, [2], again).preds, again)
    line = next(x for x in text.splitlines() if "machine load while measured" in x)
    assert "BUSY" in line and m.busy in line


@per_frame
def waits_half_a_second(positions, box):
    """A per-frame function that takes 0.5 s of wall time and almost no CPU time."""
    import time

    time.sleep(0.5)
    return positions[:, 0, 0].astype(np.float64)


@linux
@pytest.mark.cli
def test_a_run_records_its_files_cache_state_and_a_busy_machine(adk_vacuum, adk_vacuum_h5md):
    """A run started with its file dropped from the page cache records it cold; the next, cached; a run beside
    a busy loop records the load, and the prediction from its report says so."""
    import trajscale
    from trajscale.report.conditions import RunConditions
    from trajscale.report.predict import fit, format_predictions
    from trajscale.report.table import format_table

    psf = adk_vacuum[0]
    _drop(adk_vacuum_h5md)
    if page_cache([adk_vacuum_h5md]).resident > 0.1:
        pytest.skip("this file system keeps its pages after POSIX_FADV_DONTNEED")
    cold = trajscale.run(trajscale.RMSD(select="name CA"), psf, adk_vacuum_h5md).report
    assert RunConditions.from_dict(cold.conditions).page_cache.case == "cold"
    with busy_loop():   # a run long enough (0.5 s) for the loop's share to show in the CPU clock's 10 ms ticks
        warm = trajscale.run(trajscale.PerFrame(waits_half_a_second, select="name CA"), psf, adk_vacuum_h5md).report
    conds = RunConditions.from_dict(warm.conditions)
    assert conds.page_cache.case == "cached" and conds.page_cache.bytes == os.path.getsize(adk_vacuum_h5md)
    assert conds.load.busy, conds.load.describe()
    model = fit(warm, "processes")
    assert model.page_cache == conds.page_cache.resident
    assert "machine load while the report ran" in format_predictions(model, [])
    table = format_table(warm)   # the report's own table says it too
    assert "(BUSY:" in table and "in the page cache at its start" in table
