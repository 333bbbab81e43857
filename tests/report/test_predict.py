"""``trajscale report --predict``: the model's equations on hand-made reports, the CLI, and one real check.

The hand-made reports (tests/report/_synth.py) have known per-unit costs, so every predicted term is
compared with the docs' equation evaluated here by hand (docs/benchmarks.md, "Predicting a run at N ranks").
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import run_cli
from tests.report._synth import make_report
from trajscale.report.predict import Machine, efficiency_threshold, fit, predict_model, terms_at, wall_at

MB = 10**6


def _serial(t_io=8.0, t_compute=2.0, frames=1000, bytes_per_frame=MB, imports=1.0, topology=0.5, chunks=1,
            n_tasks=1):
    """A serial report: ``n_tasks`` tasks over ``frames`` frames, with a process record."""
    r = make_report([{"t_io": t_io, "t_compute": t_compute, "t_init_traj": 0.0, "t_comm": 0.0}],
                    tasks_per_worker=n_tasks, frames_per_task=frames // n_tasks, bytes_per_frame=bytes_per_frame,
                    executor="serial",
                    source={"format": "h5md", "path": "t.h5md", "chunks": [chunks, 100, 3]})
    phases = dict.fromkeys(("imports", "mpi_init", "topology", "prepare", "pool_start", "tasks", "reduce", "write"),
                           0.0)
    phases.update(imports=imports, topology=topology, tasks=t_io + t_compute)
    r.process = {"t_wall": sum(phases.values()), "phases": phases, "origin": "process start"}
    return r


def test_wall_at_n_follows_the_documented_equation():
    r = _serial()
    model = fit(r, "mpi")
    assert model.read_s_per_byte == pytest.approx(8.0 / (1000 * MB))
    assert model.compute_s_per_frame == pytest.approx(2.0 / 1000)
    assert model.fixed_s == pytest.approx(1.5)
    # N = 1: the serial run itself (fixed + read + compute)
    assert wall_at(model, 1) == pytest.approx(1.5 + 8.0 + 2.0)
    # N = 16: 64 tasks (4 per rank), 4 per rank of 1000/64 frames each; one open; log2(16) = 4 stages
    t = terms_at(model, 16)
    q_frames = 4 * 1000 / 64
    assert t["read"] == pytest.approx(q_frames * MB * 8.0 / (1000 * MB))
    assert t["compute"] == pytest.approx(q_frames * 2.0 / 1000)
    assert t["metadata"] == pytest.approx(model.open_s)
    assert t["communication"] == pytest.approx(4 * (model.alpha_s + model.job_bytes / 1e9))
    expected = 1.5 + model.launch_s + model.open_s + 10.0 / 16 + t["communication"]
    assert wall_at(model, 16) == pytest.approx(expected)


def test_storage_bandwidth_caps_reads_and_is_named_the_limit():
    model = fit(_serial(imports=0.1, topology=0.05), "mpi")   # one rank reads 1 GB in 8 s: 0.125 GB/s
    machine = Machine(storage_gbps=1.0)
    t = terms_at(model, 64, machine)
    # 64 ranks share 1 GB/s: each reads its 1/64 GB at 1/64 GB/s, 1 s, not 8/64 s
    assert t["read"] == pytest.approx((1000 * MB / 64) / (1e9 / 64))
    pred = predict_model(model, [64], machine)[0]
    assert pred.limit == "storage bandwidth"
    assert pred.efficiency < 0.5


def test_metadata_server_serialises_opens():
    model = fit(_serial(), "mpi")
    t = terms_at(model, 128, Machine(metadata_ms=2.0))
    assert t["metadata"] == pytest.approx(128 * 1 * 2.0e-3)


def test_fixed_task_count_caps_the_speedup():
    r = _serial(imports=0.1, topology=0.05, n_tasks=8)
    r.meta["n_tasks_asked"] = 8   # the run fixed its tasks (--tasks 8): 8 at every N
    model = fit(r, "mpi")
    preds = predict_model(model, [8, 64])
    assert preds[0].n_tasks == preds[1].n_tasks == 8
    # 64 ranks run no faster than 8 (beyond the log2 N communication)
    assert preds[1].t_wall >= preds[0].t_wall
    assert preds[1].limit == "too few tasks or chunks"


def test_chunks_cap_the_task_count():
    # 1000 frames in chunks of 100: 10 tasks at most
    model = fit(_serial(chunks=100, imports=0.1, topology=0.05), "mpi")
    assert model.max_tasks == 10
    assert predict_model(model, [128])[0].n_tasks == 10
    assert predict_model(model, [128])[0].limit == "too few tasks or chunks"


def test_efficiency_threshold_is_the_first_n_below_0_7():
    model = fit(_serial(), "mpi")
    n = efficiency_threshold(model)
    w1 = wall_at(model, 1)
    assert w1 / wall_at(model, n) / n < 0.7 <= w1 / wall_at(model, n - 1) / (n - 1)


def test_a_read_straggler_in_the_report_slows_every_larger_prediction():
    even = make_report([{"t_io": 2.0}, {"t_io": 2.0}, {"t_io": 2.0}, {"t_io": 2.0}])
    slow = make_report([{"t_io": 2.0}, {"t_io": 2.0}, {"t_io": 2.0}, {"t_io": 8.0}])
    m_even, m_slow = fit(even), fit(slow)
    assert m_slow.slow_read == pytest.approx(4.0) and "rank 3" in m_slow.straggler
    assert m_even.straggler == ""
    for n in (16, 128):
        excess = terms_at(m_slow, n)["straggler"]
        assert excess == pytest.approx(3 * terms_at(m_slow, n)["read"])   # its read share at 4x the rate
        assert wall_at(m_slow, n) == pytest.approx(wall_at(m_even, n) + excess)


# -- the command ------------------------------------------------------------------------------------

def _write(tmp_path, report, name="r.json"):
    path = tmp_path / name
    report.write(path)
    return path


def test_cli_predict_prints_the_table_and_writes_json(tmp_path):
    path = _write(tmp_path, _serial(imports=0.1, topology=0.05))
    out = tmp_path / "pred.json"
    proc = run_cli("report", str(path), "--predict", "2,16,128", "--storage-gbps", "1", "--metadata-ms", "1",
                   "--nodes", "4", "--cores-per-node", "32", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "E(N) falls below 0.7 at N =" in proc.stdout
    preds = json.loads(out.read_text())["predictions"]
    assert [p["n"] for p in preds] == [2, 16, 128]
    assert set(preds[0]) == {"n", "t_wall", "speedup", "efficiency", "limit"}
    model = fit(_serial(imports=0.1, topology=0.05), "mpi")
    machine = Machine(1.0, 1.0, 4, 32)
    for p in preds:
        assert p["t_wall"] == pytest.approx(wall_at(model, p["n"], machine), rel=1e-9)
        assert p["efficiency"] == pytest.approx(p["speedup"] / p["n"])
    assert preds[-1]["limit"] == "storage bandwidth"


def test_cli_json_out_refuses_an_input_and_an_existing_file(tmp_path):
    path = _write(tmp_path, _serial())
    before = path.read_bytes()
    proc = run_cli("report", str(path), "--predict", "2", "--json", str(path))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and str(path) in proc.stderr
    assert path.read_bytes() == before
    other = tmp_path / "exists.json"
    other.write_text("keep")
    proc = run_cli("report", str(path), "--predict", "2", "--json", str(other))
    assert proc.returncode != 0 and "--overwrite" in proc.stderr and other.read_text() == "keep"
    proc = run_cli("report", str(path), "--predict", "2", "--json", str(other), "--overwrite")
    assert proc.returncode == 0 and json.loads(other.read_text())["predictions"][0]["n"] == 2


@pytest.mark.parametrize("bad", ["0", "two", "2,,x"])
def test_cli_refuses_bad_rank_counts(tmp_path, bad):
    path = _write(tmp_path, _serial())
    proc = run_cli("report", str(path), "--predict", bad)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


# -- one real check on this machine -----------------------------------------------------------------

#: Issue 26: the prediction of processes(2) from a serial run is within 25 % of the measured whole run.
TOLERANCE = 0.25


def _whole(args):
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "trajscale.cli.main", *args], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return time.perf_counter() - t0


def free_cores(n: int = 2, seconds: float = 1.0) -> int:
    """Cores this machine gives ``n`` busy processes now (1 or more): their CPU seconds over the wall.

    On the shared 2-core test VM other jobs often leave a parallel run one core, not two.
    """
    code = (f"import time\nt = time.perf_counter() + {seconds!r}\nwhile time.perf_counter() < t: pass\n"
            "print(time.process_time())")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    cpu = sum(float(p.communicate()[0]) for p in procs)
    return max(1, round(cpu / seconds))


def test_processes_2_predicted_from_a_serial_run_within_25_percent(tmp_path):
    """120 frames x 47,681 atoms, RDF of CA against water O (~50 ms a frame, so the tasks and not the
    interpreter's start dominate): whole processes timed from outside.

    The model is told the cores two busy processes get on this machine (``free_cores``, measured before the
    serial runs, between them and the parallel ones, and after), as a user gives ``--cores-per-node``: on the
    shared 2-core VM other jobs often leave one.  If that changed during the measurement, the comparison says
    nothing and is skipped.
    """
    from trajscale.demo import build_demo_file
    from trajscale.report.timing import RunReport

    tpr, h5 = build_demo_file(tmp_path, 120, progress=False)
    base = ["run", "rdf", tpr, h5, "--select1", "name CA", "--select2", "name OW"]
    _whole([*base, "--stop", "3"])   # warm the page cache and the topology cache, as a user's second run would be
    # Other work on the machine only ever lengthens a run, so each side is the faster of two runs (the serial
    # side's report is the faster run's): one burst of load in one run (CI: a 2-core VM shared with other
    # jobs) no longer moves the comparison; and the cores are probed before, between and after.
    before = free_cores()
    serial = {}
    for k in range(2):
        rep = tmp_path / f"serial{k}.json"
        serial[_whole([*base, "--report", str(rep), "--out", str(tmp_path / f"s{k}.h5")])] = rep
    rep = serial[min(serial)]
    between = free_cores()
    measured = min(_whole([*base, "--executor", "processes", "-n", "2", "--out", str(tmp_path / f"p{k}.h5")])
                   for k in range(2))
    after = free_cores()
    pred = predict_model(fit(RunReport.load(rep), "processes"), [2], Machine(cores_per_node=before))[0]
    if not before == between == after or before < 2:
        # the comparison the issue asks for is processes(2) on two free cores; with one (the machine busy
        # with other work), two busy loops measured 1 core while the run itself got 2 (CI: 3.73 s predicted
        # for 1 core, 2.55 s measured), so a skip names both numbers instead of judging the model on noise
        pytest.skip(f"the cores two processes got were {before} before, {between} between and {after} after "
                    f"the measurement, not 2 each time: predicted {pred.t_wall:.2f} s, measured {measured:.2f} s")
    assert abs(pred.t_wall / measured - 1) <= TOLERANCE, (pred.t_wall, measured, before)
    assert math.isfinite(pred.speedup) and 0 < pred.efficiency <= 1


def test_levers_say_what_moves_the_efficiency_point():
    """Chunks of 100 frames allow 10 tasks: rechunking to one-frame chunks moves the E < 0.7 point up;
    fixing the task count is the other lever for a run that fixed it."""
    from trajscale.report.predict import levers

    model = fit(_serial(chunks=100, imports=0.1, topology=0.05), "mpi")
    base = efficiency_threshold(model)
    moved = dict(levers(model))
    layout = next(k for k in moved if k.startswith("layout"))
    assert moved[layout] > base
    assert not any(k.startswith("task count") for k in moved)   # the run did not fix its task count
    r = _serial(imports=0.1, topology=0.05, n_tasks=8)
    r.meta["n_tasks_asked"] = 8
    fixed = fit(r, "mpi")
    moved = dict(levers(fixed))
    assert moved["task count: `--tasks` unset (4 tasks per rank)"] > efficiency_threshold(fixed)
