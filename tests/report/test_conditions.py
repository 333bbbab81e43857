"""What a measurement shared its machine with, and its files' page-cache state: real processes, real files.

The busy machine is a real busy loop (``python -c "while True: pass"``) beside the measurement; the
page cache is the kernel's, dropped with ``posix_fadvise(POSIX_FADV_DONTNEED)`` and compared with
util-linux's ``fincore``.  The tests assert that a busy loop is seen; they never assert that a machine
is idle (the machine running them may be shared).  That a measurement's own processes are not taken
for other work is asserted instead against their own clocks: every process a measurement starts
carries a marker in its environment, and the CPU time of each (``/proc/PID/stat``) is watched from
outside while it lives (:class:`MarkedTree`), whoever its parent is by then.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

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
def busy_loop(loops: int = 1):
    """Real busy loops (``while True: pass``), each on one core, running before and after the block: the pid
    (``loops=1``) or the pids."""
    pids = []
    try:
        for _ in range(loops):
            launcher = subprocess.run([sys.executable, "-c", DETACHED_LOOP], capture_output=True, text=True,
                                      check=True, timeout=60)
            pids.append(int(launcher.stdout.split()[0]))
        time.sleep(0.3)   # they are running before the measurement starts
        yield pids[0] if loops == 1 else pids
    finally:
        for pid in pids:
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


# -- the measurement's own processes --------------------------------------------------------------------

#: The environment variable that marks the processes a test's measurement starts (every one inherits it).
MARK = "TRAJSCALE_TEST_TREE"


@dataclass
class Marked:
    """One marked process as last seen: its own CPU seconds (not its children's), its parent, its command;
    ``parents``: every parent it was seen with (the one that started it, then the subreaper it came back to
    when that one exited first, as a forkserver's workers do)."""

    pid: int
    cpu_s: float
    ppid: int
    cmd: str
    parents: set = field(default_factory=set)


class MarkedTree:
    """The processes whose environment (``/proc/PID/environ``) holds ``MARK=token``, watched from outside every
    ``every`` seconds while they live, whoever reaps them: the CPU time each had when last seen (a lower
    bound of what it used: what it spent after its last look is missed).

    A process found unmarked is not read again while its pid stays in ``/proc`` (a look read every process's
    ``stat``, ~6 ms on a quiet machine, 20 times a second for a whole run): a pid that is gone at one look and
    there at the next is a new process, judged again, and the kernel cannot hand out all of its pids in
    between."""

    def __init__(self, token: str, every: float = 0.05) -> None:
        self.needle = f"{MARK}={token}".encode()
        self.every = every
        self.procs: dict[tuple[int, int], Marked] = {}    # by (pid, start time): a pid may be reused
        self._judged: dict[tuple[int, int], bool] = {}
        self._unmarked: set[str] = set()   # the pids found unmarked, there at the last look
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="marked-tree")

    @property
    def cpu_s(self) -> float:
        return sum(p.cpu_s for p in self.procs.values())

    def _look(self) -> None:
        hz = os.sysconf("SC_CLK_TCK")
        names = os.listdir("/proc")
        self._unmarked &= set(names)   # a pid gone since is a new process when it comes back
        for name in names:
            if name in self._unmarked or not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    stat = fh.read()
                f = stat[stat.rindex(b")") + 2:].split()
                key = (int(name), int(f[19]))
                if key not in self._judged:
                    with open(f"/proc/{name}/environ", "rb") as fh:
                        self._judged[key] = self.needle in fh.read().split(b"\0")
                    if self._judged[key]:
                        with open(f"/proc/{name}/cmdline", "rb") as fh:
                            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
                        self.procs[key] = Marked(key[0], 0.0, int(f[1]), cmd)
            except (OSError, ValueError):   # gone, or not ours to read
                continue
            if not self._judged[key]:
                self._unmarked.add(name)
            else:
                p = self.procs[key]
                p.cpu_s = max(p.cpu_s, (int(f[11]) + int(f[12])) / hz)
                if int(f[1]) != 1:   # the parent that started it, or the subreaper it came back to
                    p.ppid = int(f[1])
                    p.parents.add(p.ppid)

    def _watch(self) -> None:
        while not self._halt.is_set():
            self._look()
            self._halt.wait(self.every)

    def __enter__(self) -> MarkedTree:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._halt.set()
        self._thread.join()
        self._look()


@contextmanager
def marked_tree(monkeypatch, every: float = 0.05):
    """Every process started in the block carries a marker of its own (the environment, inherited at any
    depth): the :class:`MarkedTree` watching them every ``every`` seconds."""
    token = uuid.uuid4().hex
    monkeypatch.setenv(MARK, token)
    with MarkedTree(token, every) as tree:
        yield tree
    monkeypatch.delenv(MARK)


def _self_cpu() -> float:
    """CPU seconds of this process alone (every thread), not of its children."""
    t = os.times()
    return t.user + t.system


#: CPU seconds the kernel's per-process clock and its waited-for children's totals may differ by (ticks).
TICKS_S = 0.05

ORPHAN = """import os, sys, time
if os.fork() == 0:   # its parent exits at once: it is reparented while it computes
    t0 = time.process_time()
    while time.process_time() - t0 < 0.5:
        pass
    with open(sys.argv[1] + ".part", "w") as fh:
        fh.write(repr(time.process_time()))
    os.rename(sys.argv[1] + ".part", sys.argv[1])
    os._exit(0)
"""


@linux
@pytest.mark.cli
def test_a_process_whose_parent_exits_first_is_the_meters_own_work(tmp_path):
    """A grandchild orphaned while it computes (as a forkserver's workers are, or a daemon) comes back to the
    meter's process, and its CPU time, by its own clock, is counted as the measurement's own."""
    done = tmp_path / "cpu"
    mine = _self_cpu()
    meter = LoadMeter("test", adopt=True)
    subprocess.run([sys.executable, "-c", ORPHAN, str(done)], check=True, timeout=60)
    deadline = time.monotonic() + 120
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)   # it has exited after writing
    load = meter.stop()
    mine = _self_cpu() - mine
    orphan = float(done.read_text())
    assert load.own_s - mine >= orphan - TICKS_S, (load, orphan)


def _dask_run_measured(psf, h5, monkeypatch) -> tuple:
    """One of the launch calibration's whole runs on a Dask cluster of 2 (its workers forked from a
    forkserver), measured as the calibration measures it: (load, this process's CPU seconds, the marked tree)."""
    from trajscale.report.calibrate import timed_run

    with marked_tree(monkeypatch) as tree:
        mine = _self_cpu()
        meter = LoadMeter("launch calibration", adopt=True)
        timed_run(["run", "rgyr", psf, h5, "--select", "all", "-q"], "dask", 2)
        load = meter.stop()
        mine = _self_cpu() - mine
    return load, mine, tree


@linux
@pytest.mark.cli
@pytest.mark.slow(seconds=30)
def test_a_calibration_run_on_a_dask_forkserver_is_its_own_work_and_busy_loops_are_not(
        adk_vacuum, adk_vacuum_h5md, monkeypatch):
    """The forkserver a Dask run leaves behind and the workers it forked are the calibration's own work: the
    CPU time of every process the run started (each by its own clock) is counted as the measurement's, so an
    idle machine's calibration says idle whatever else this machine runs.  Beside a busy loop the calibration
    still says busy, and the loop's CPU time is the other work (one loop, a core's work, is past what makes a
    load busy on any machine: a loop on every core burnt every core for the whole run)."""
    pytest.importorskip("distributed")
    load, mine, tree = _dask_run_measured(adk_vacuum[0], adk_vacuum_h5md, monkeypatch)
    # the workers were forked from a forkserver: it and the two workers have its command line (which of them is
    # the server is not asked: a loaded machine's sampler may first see either after its parent ended)
    served = [p for p in tree.procs.values() if "multiprocessing.forkserver" in p.cmd]
    assert len(served) >= 3, tree.procs
    assert load.own_s - mine >= tree.cpu_s - TICKS_S, (load, mine, tree.procs)

    with busy_loop() as pid:
        before = _cpu_s(pid)
        load, mine, tree = _dask_run_measured(adk_vacuum[0], adk_vacuum_h5md, monkeypatch)
        spent = _cpu_s(pid) - before
    assert load.busy, load.describe()
    assert load.own_s - mine >= tree.cpu_s - TICKS_S, (load, mine, tree.procs)
    assert load.others_s >= 0.8 * spent, (load, spent)
