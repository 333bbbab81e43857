"""A stop signal ends a run within seconds, even inside a long task: SIGTERM (what ``scancel`` and a SLURM
time limit send, ``KillWait`` before SIGKILL) to ``trajscale run`` during an RDF whose one task computes
for tens of seconds ends it with the interrupted command's one line and exit code 143, every worker gone.

Tasks look for the signal between their blocks, and a block of an analysis that declares much work per
frame (an RDF's pairs) is planned to compute for a fraction of a second; a pool's workers end at the
pool's SIGTERM (never in the command line's handler a forked worker would inherit), so the parent never
waits in a thread's join at exit.  The bound is loose (a loaded 2-core machine): the run left alone takes
several times longer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.test_orphans import _alive, _descendants

DATA = Path(D.__file__).parent / "data"
TPR, XTC = str(DATA / "adk_oplsaa.tpr"), str(DATA / "adk_oplsaa.xtc")

pytestmark = [pytest.mark.cli, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

#: Seconds from SIGTERM to the run's end, on a loaded machine (one block computes for ~0.35 s idle).
BOUND_S = 6.0
#: Frames of the trajectory: the run alone computes for ~15 s idle (an RDF of every atom with every atom to
#: 15 Å: ~10^8 pairs a frame within the cut-off).
FRAMES = 40


@pytest.fixture(scope="module")
def long_h5md(tmp_path_factory):
    """AdK in water (47,681 atoms) written as 40 frames (its XTC's 10, four times over) by ParallelWriter."""
    import MDAnalysis as mda

    from trajscale.pwrite import ParallelWriter

    u = mda.Universe(TPR, XTC)
    frames = [(ts.positions.copy(), ts.dimensions.copy()) for ts in u.trajectory]
    pos = np.array([p for p, _ in frames], np.float32)
    box = np.array([b for _, b in frames], np.float32)
    reps = FRAMES // len(pos)
    path = tmp_path_factory.mktemp("stop") / "adk40.h5md"
    with ParallelWriter(path, u.atoms.n_atoms, topology=u) as w:
        w.write_frames(0, np.tile(pos, (reps, 1, 1)), step=np.arange(FRAMES), time=np.arange(FRAMES, dtype=float),
                       box=np.tile(box, (reps, 1)))
    return TPR, str(path)


def stop_mid_run(tmp_path, top: str, traj: str, *executor: str, env: dict | None = None,
                 select: tuple[str, str] = ("all", "all")) -> tuple[subprocess.CompletedProcess, float, set]:
    """Start an RDF of ``select`` (every atom with every atom), SIGTERM it once its tasks compute, and time its
    end; the processes that were below it and are still alive then."""
    out = tmp_path / "rdf.csv"
    cmd = [sys.executable, "-m", "trajscale.cli.main", "run", "rdf", top, traj, "--select1", select[0],
           "--select2", select[1], "--out", str(out), "--no-progress", "-v", *executor]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**(env or os.environ), "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None and not any(" tasks on " in ln for ln in lines):
        time.sleep(0.05)   # the debug line said just before the tasks run
    assert proc.poll() is None, "the run ended before the test could stop it:\n" + "".join(lines)
    time.sleep(1.5)   # well inside the first task's blocks
    kids = _descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    t0 = time.time()
    try:
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seconds = time.time() - t0
    reader.join(10)
    stdout = proc.stdout.read()
    t1 = time.time()
    while _alive(kids) and time.time() - t1 < 10:
        time.sleep(0.05)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, "".join(lines)), seconds, _alive(kids)


@pytest.mark.slow(seconds=15)
@pytest.mark.parametrize("executor", [("--executor", "serial"), ("--executor", "processes", "-n", "2"),
                                      ("-n", "2",)], ids=["serial", "processes", "auto"])
def test_sigterm_ends_a_long_task_within_seconds(tmp_path, long_h5md, executor):
    if executor == ("--executor", "serial"):
        # The task looks for the signal between its blocks (one frame each here): blocks of CA atoms, each
        # stretched by a 1 s wait, whatever the machine's load. (A block of every atom's RDF, one frame,
        # computes for ~0.35 s idle but took 7-10 s in the whole suite's load: a frame is not left midway.)
        proc, seconds, left = stop_mid_run(tmp_path, *long_h5md, *executor, "--max-block-mb", "0.01",
                                           env={**os.environ, "TRAJSCALE_TEST_SLOW_COMPUTE": "1"},
                                           select=("name CA", "name CA"))
    else:
        proc, seconds, left = stop_mid_run(tmp_path, *long_h5md, *executor)
    print(f"{executor}: ended {seconds:.2f} s after SIGTERM")
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-3000:]
    assert seconds < BOUND_S, f"the run took {seconds:.1f} s to end after SIGTERM"
    assert not left, f"processes {left} outlived the run"
    said = [ln for ln in proc.stderr.splitlines() if "terminated" in ln]
    assert said == ["trajscale run: terminated by signal 15; no partial output was kept"], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "rdf.csv").exists()
