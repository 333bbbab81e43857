"""``trajscale probe``: the machinery on tiny bounds (its accuracy against dd/fio is a benchmark:
``python benchmarks/predict.py --probe-check``), its profile accepted by ``report --predict``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import run_cli, run_mpi
from tests.report.test_predict import _serial
from trajscale.report.machine import Machine


def test_the_probes_workers_start_by_the_rule(monkeypatch):
    """The process the probe moves pickled arrays to starts as every worker of trajscale does: a fork asked
    for while another thread runs here is refused in one line, not obeyed; a forkserver's worker measures."""
    import threading

    from trajscale.errors import ConfigError
    from trajscale.report.probe import transfer_s_per_byte

    monkeypatch.setenv("TRAJSCALE_START_METHOD", "fork")
    stop = threading.Event()
    running = threading.Thread(target=stop.wait)
    running.start()
    try:
        with pytest.raises(ConfigError, match="^TRAJSCALE_START_METHOD=fork refused: .*other thread"):
            transfer_s_per_byte(nbytes=8, rounds=1)
    finally:
        stop.set()
        running.join()
    monkeypatch.setenv("TRAJSCALE_START_METHOD", "forkserver")
    assert 0 < transfer_s_per_byte(nbytes=64 * 1024, rounds=2) < 1e-3


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_probe_writes_a_profile_that_predict_accepts(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    prof = tmp_path / "m.json"
    proc = run_cli("probe", str(store), "--seconds", "2", "--bytes", "16M", "--readers", "2", "--out", str(prof))
    assert proc.returncode == 0, proc.stderr
    assert list(store.iterdir()) == []   # its file is removed
    m = Machine.load(prof)
    assert [k for k, _ in m.read_curve] == [1, 2] and all(r > 0 for _, r in m.read_curve)
    assert m.open_ms is not None and m.open_ms > 0 and m.block_bytes > 0
    assert "cold" in m.cold or "could not tell" in m.cold
    assert m.origin_of("read_curve").startswith("measured by trajscale probe")
    # a pickled array to a worker process and back: slower than memory, faster than a floppy disk
    assert 1e-11 < m.transfer_s_per_byte < 1e-6
    assert m.origin_of("transfer_s_per_byte").startswith("measured by trajscale probe")
    rep = tmp_path / "r.json"
    _serial(imports=0.1, topology=0.05).write(rep)
    proc = run_cli("report", str(rep), "--predict", "2,8", "--machine", str(prof))
    assert proc.returncode == 0, proc.stderr
    assert "storage read GB/s by readers" in proc.stdout and "measured by trajscale probe" in proc.stdout
    assert "moving a pickled object between processes" in proc.stdout
    # an existing profile is kept without --overwrite
    before = prof.read_bytes()
    proc = run_cli("probe", str(store), "--seconds", "1", "--bytes", "8M", "--out", str(prof))
    assert proc.returncode != 0 and "--overwrite" in proc.stderr and prof.read_bytes() == before


@pytest.mark.cli
def test_probe_refuses_a_missing_path_and_tiny_bytes(tmp_path):
    proc = run_cli("probe", str(tmp_path / "nope"), "--seconds", "1", "--bytes", "8M")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "nope" in proc.stderr
    proc = run_cli("probe", str(tmp_path), "--seconds", "1", "--bytes", "1K")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr


@pytest.mark.mpi
def test_probe_under_mpiexec_rank_0_gathers(tmp_path):
    prof = tmp_path / "m.json"
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "probe", str(tmp_path), "--seconds", "2", "--bytes", "16M",
                       "--out", str(prof)])
    assert proc.returncode == 0, proc.stderr
    d = json.loads(prof.read_text())
    assert [k for k, _ in d["read_curve"]] == [1, 2]
    assert d["nodes"] == 1 and "under MPI" in d["origin"]["read_curve"]


def _calibrated(tmp_path, executors: str, monkeypatch) -> Machine:
    """``probe --launch --executors EXECUTORS``: its launch lines used by ``--predict`` as documented (at the
    cores, plus each further worker's share of the cores), its calibration files removed, and every process
    it started (a Dask run's forkserver and the workers forked from it, MPI's proxies and ranks, the readers)
    counted as its own work, not as other work: the CPU time each had by its own clock, watched from outside,
    is in the profile's loads."""
    import os

    from tests.report.test_conditions import TICKS_S, marked_tree
    from trajscale.report.predict import fit, launch_at

    store = tmp_path / "store"
    store.mkdir()
    prof = tmp_path / "m.json"
    # on one core of the machine (a job given one CPU): the calibration's points are 1 and 4 workers, half of
    # what they would be on the suite's 2 cores, and so is the CPU of the Dask workers and MPI ranks it starts
    one_core = ["taskset", "-c", str(min(os.sched_getaffinity(0)))] if shutil.which("taskset") else []
    with marked_tree(monkeypatch, every=0.1) as tree:
        proc = subprocess.run([*one_core, sys.executable, "-m", "trajscale.cli.main", "probe", str(store),
                               "--seconds", "1", "--bytes", "8M", "--launch", "--executors", executors,
                               "--out", str(prof)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert list(store.iterdir()) == []   # the probe's file and the calibration set are removed
    m = Machine.load(prof)
    # The probe's own process is measured by its own clock; everything it started (whose CPU time outside the
    # two measurements is only the last resource tracker's exit) must be within the loads' own time.
    started = sum(p.cpu_s for p in tree.procs.values() if p.ppid != os.getpid())
    assert [x.what for x in m.loads] == ["probe", "launch calibration"]
    assert sum(x.own_s for x in m.loads) >= started - 4 * TICKS_S, (m.loads, tree.procs)
    assert [line.executor for line in m.launch] == executors.split(",")
    assert m.origin_of("launch").startswith("measured: calibrated on whole runs")
    c = m.cores
    for line in m.launch:
        assert line.at_cores_s >= 0 and line.per_worker_s >= 0 and line.collective_open_s >= 0
        assert line.per_atom_s >= 0 and line.wall_range[0] <= 1.0 <= line.wall_range[1]
        model = fit(_serial(imports=0.1, topology=0.05), line.executor, ran_on=m)
        per = (line.per_worker_s + line.per_atom_s * model.atoms
               + (line.collective_open_s if line.executor == "mpi" else 0.0))   # an H5MD report
        for n in (max(c, 2), 4 * c):   # (one worker is no launch: at the cores when they are 2 or more)
            want = line.at_cores_s + per * (n - c) / c
            assert abs(launch_at(model, n, m)[0] - want) <= 1e-12 * max(1.0, want)
    rep = tmp_path / "r.json"
    _serial(imports=0.1, topology=0.05).write(rep)
    proc = run_cli("report", str(rep), "--predict", "2,8", "--machine", str(prof))
    assert proc.returncode == 0, proc.stderr
    assert "launch" in proc.stdout and "calibrated on whole runs" in proc.stdout
    return m


@pytest.mark.mpi
@pytest.mark.slow(seconds=60)
def test_probe_launch_calibrates_every_executor_on_whole_runs(tmp_path, monkeypatch):
    """One probe for the pools and MPI: the calibration set is written, and run serially, once."""
    pytest.importorskip("distributed")
    _calibrated(tmp_path, "processes,dask,mpi", monkeypatch)


def test_probe_launch_calibrates_every_executor_installed_unless_told():
    import importlib.util
    import shutil

    from trajscale.cli.probe import _calibrated as chosen
    from trajscale.errors import ConfigError

    here = chosen(None)
    assert "processes" in here and "serial" not in here and "threads" not in here
    assert ("mpi" in here) == bool(shutil.which("mpiexec") and importlib.util.find_spec("mpi4py"))
    assert ("dask" in here) == bool(importlib.util.find_spec("distributed"))
    assert chosen(["processes", "processes"]) == ["processes"]
    for bad in (["serial"], ["nope"], []):
        with pytest.raises(ConfigError, match="the executors calibrated here are processes"):
            chosen(bad)


@pytest.mark.cli
def test_probe_executors_without_launch_is_refused(tmp_path):
    proc = run_cli("probe", str(tmp_path), "--executors", "processes")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "give --launch too" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.mpi
def test_probe_launch_is_refused_under_mpiexec(tmp_path):
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "probe", str(tmp_path), "--seconds", "1", "--bytes", "8M",
                       "--launch"])
    assert proc.returncode != 0 and "without mpiexec" in proc.stderr and "Traceback" not in proc.stderr
