"""The report accounts for the whole wall time of a run, from each process's start (issue 23, section 4).

Whole ``trajscale run`` processes are timed from outside (the parent's clock, from launching the
subprocess to its exit) and compared, loosely, with what their reports say. Slow starts are injected
with the test hook ``TRAJSCALE_TEST_SLOW_START`` (see :mod:`trajscale.timeline`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import mpiexec, run_cli, run_cli_here

#: The phases issue 23 asks for, in the record's names.
PROCESS_PHASES = ("imports", "mpi_init", "topology", "prepare", "cluster_start", "queue_wait", "pool_start", "tasks",
                  "reduce", "report", "write")

CLI = ["-m", "trajscale.cli.main"]
#: Loose bound: the outside clock also counts interpreter shutdown (and, under MPI, mpiexec's own start).
OUTSIDE_FRACTION = 0.7


def _rmsd_args(adk_vacuum, report, executor, n=None):
    args = ["run", "rmsd", *adk_vacuum, "--executor", executor, "--report", str(report)]
    return args + (["-n", str(n)] if n else [])


def _timed(fn, *args, **kw):
    t0 = time.time()
    proc = fn(*args, **kw)
    return proc, t0, time.time()


def _run_mpi(n, args, env=None, timeout=240):
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run([mpiexec(), "-n", str(n), sys.executable, *CLI, *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, check=False)


def _launch(kind, adk_vacuum, report, env=None):
    if kind == "mpi":
        return _timed(_run_mpi, 2, _rmsd_args(adk_vacuum, report, "mpi"), env)
    n = 2 if kind == "processes" else None
    return _timed(run_cli, *_rmsd_args(adk_vacuum, report, kind, n), env=dict(os.environ, **(env or {})))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the start from /proc is Linux's")
def test_process_start_is_not_moved_by_a_slow_proc_read(monkeypatch):
    """A process preempted while it reads /proc/self/stat (a loaded machine) still gets its own start: the
    epoch and boot clocks are read together, not 0.2 s apart (the start came out 0.2 s early)."""
    from trajscale import timeline as process

    monkeypatch.setattr(process, "_START", {})
    calm = process.process_start()

    def slow_open(*args, **kw):
        time.sleep(0.2)
        return open(*args, **kw)

    monkeypatch.setattr(process, "_START", {})
    monkeypatch.setattr(process, "open", slow_open, raising=False)
    assert process.process_start() == pytest.approx(calm, abs=0.02)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["serial", "processes", "mpi"])
def test_phases_cover_the_process_wall_measured_from_outside(kind, adk_vacuum, tmp_path):
    report = tmp_path / "r.json"
    proc, t0, t1 = _launch(kind, adk_vacuum, report)
    assert proc.returncode == 0, proc.stderr
    outside = t1 - t0
    d = json.loads(report.read_text())
    rec = d["process"]
    assert set(rec["phases"]) == set(PROCESS_PHASES)
    assert all(v >= 0 for v in rec["phases"].values())
    covered = sum(rec["phases"].values())
    assert 0.95 * rec["t_wall"] <= covered <= rec["t_wall"] * 1.001 + 1e-6
    # The process's start as the OS counts it: after the parent launched it (10 ms clock ticks), and the
    # wall from there is most of what the parent saw (today's report said 0.10 s of a 1.71 s job).
    assert t0 - 0.05 <= rec["t_begin"] <= t0 + 0.5 * outside
    assert rec["t_wall"] >= OUTSIDE_FRACTION * outside, (rec, outside)
    assert rec["t_wall"] > d["t_total"]
    assert rec["phases"]["imports"] > 0 and rec["phases"]["tasks"] > 0 and rec["phases"]["topology"] > 0
    if kind == "mpi":
        assert rec["phases"]["mpi_init"] > 0
    if kind == "processes":
        assert rec["phases"]["pool_start"] > 0
    # every worker and rank: from its process start to ready for its first task
    assert len(d["workers"]) == (1 if kind == "serial" else 2)
    for w in d["workers"]:
        assert 0 < w["t_start"] <= rec["t_wall"]
        assert rec["t_begin"] - 0.05 <= w["t_ready"] - w["t_start"] <= rec["t_end"]
    if kind != "processes":   # the run's own processes: the launching one's start-up is its imports
        first = d["workers"][0]["t_start"]
        assert first >= rec["phases"]["imports"] - 0.05
    assert "process " in proc.stdout and "from its start" in proc.stdout


@pytest.mark.cli
def test_a_short_run_gets_one_line_instead_of_straggler_advice(adk_vacuum, tmp_path):
    proc = run_cli(*_rmsd_args(adk_vacuum, tmp_path / "r.json", "processes", 2))
    assert proc.returncode == 0, proc.stderr
    # The premise, from the workers' own records: the busiest one's work under SHORT_RUN_S (1 s).  Mostly its
    # first task's opening of the DCD: 0.21 s here beside two busy loops; only a far more crowded machine
    # could stretch it past 1 s, and then the run is not short and the rest says nothing.
    work = max(sum(w[p] for p in ("t_init_traj", "t_io", "t_compute", "t_comm"))
               for w in json.loads((tmp_path / "r.json").read_text())["workers"])
    if work >= 1.0:
        pytest.skip(f"the machine stretched the busiest worker's tasks to {work:.2f} s: not a short run")
    assert proc.stdout.count("too short to diagnose") == 1
    for word in ("stragglers:", "imbalance (max/median)", "S(N)", "E(N)", "straggler:"):
        assert word not in proc.stdout, proc.stdout
    d = json.loads((tmp_path / "r.json").read_text())["diagnosis"]
    # only advice not built on task timings remains: the layout's and the format's cost (SHORT_RUN_RULES)
    assert d["too_short"] and d["advice"][0]["rule"] == "too-short"
    assert {a["rule"] for a in d["advice"][1:]} <= {"chunk-amplification", "io-bound-format"}, d["advice"]


#: The injected start-up delay. A straggler needs 1.5 x the median worker's start-up and work: H5MD
#: keeps that work short (a DCD made each worker import MDAnalysis, seconds on a loaded machine).
SLOW = 5.0


@pytest.mark.slow
def test_a_pool_worker_slow_to_start_is_a_straggler_named_start_up(adk_vacuum, adk_vacuum_h5md, tmp_path):
    report = tmp_path / "r.json"
    env = {"TRAJSCALE_TEST_SLOW_START": f"{SLOW}:one", "TRAJSCALE_TEST_SLOW_START_TOKEN": str(tmp_path / "token")}
    args = _rmsd_args((adk_vacuum[0], adk_vacuum_h5md), report, "processes", 3)
    proc = run_cli_here(*args, env=dict(os.environ, **env))
    assert proc.returncode == 0, proc.stderr
    d = json.loads(report.read_text())
    slow = [w for w in d["workers"] if w["t_start"] >= SLOW]
    assert len(slow) == 1 and len(d["workers"]) == 3   # named even if it ran no task
    strag = d["diagnosis"]["stragglers"]
    assert [(s["name"], s["component"]) for s in strag] == [(slow[0]["worker"], "t_start")]
    assert f"{slow[0]['worker']} slow in start-up" in proc.stdout
    assert d["process"]["phases"]["pool_start"] >= 0.5 * SLOW   # joining it was part of the run


@pytest.mark.mpi
def test_an_mpi_rank_slow_to_start_is_a_straggler_named_start_up(adk_vacuum, adk_vacuum_h5md, tmp_path):
    report = tmp_path / "r.json"
    args = _rmsd_args((adk_vacuum[0], adk_vacuum_h5md), report, "mpi")
    proc = _run_mpi(3, args, env={"TRAJSCALE_TEST_SLOW_START": f"{SLOW}:2"})
    assert proc.returncode == 0, proc.stderr
    d = json.loads(report.read_text())
    starts = {w["worker"]: w["t_start"] for w in d["workers"]}
    # Rank 2's start-up counts its sleep and its ordinary start-up (about the other ranks').  Half of theirs as
    # the slack, not a fixed 0.1 s, which scales with a loaded machine's start-ups (two busy loops here: the
    # three ranks' ordinary start-ups 0.41-0.57 s, within 0.02 s of each other); a start-up that left out
    # either the sleep or the ordinary part still fails.
    assert starts["rank 2"] >= SLOW + 0.5 * min(starts["rank 0"], starts["rank 1"]), starts
    strag = d["diagnosis"]["stragglers"]
    assert [(s["name"], s["component"]) for s in strag] == [("rank 2", "t_start")]
    # the ranks that waited for it are not stragglers, though their own time was as long
    assert "rank 2 was slow to start" in " ".join(a["message"] for a in d["diagnosis"]["advice"])
    assert "slow in start-up" in proc.stdout
    table = run_cli_here("report", str(report))
    assert table.returncode == 0 and "worker rank 2:" in table.stdout and "(start-up," in table.stdout
