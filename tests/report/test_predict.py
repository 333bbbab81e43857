"""``trajscale report --predict``: the model's equations on hand-made reports, the CLI, and one real check.

The hand-made reports (tests/report/_synth.py) have known per-unit costs, so every predicted term is
compared with the docs' equation evaluated here by hand (docs/benchmarks.md, "Predicting a run at N ranks").
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.conftest import run_cli_here
from tests.report._synth import make_report
from trajscale.report.machine import Machine
from trajscale.report.payload import Payload
from trajscale.report.predict import efficiency_threshold, fit, predict_model, terms_at, wall_at

#: A machine with a core for every rank these tests ask about: no oversubscription.
BIG = Machine(name="big", nodes=4, cores_per_node=1024)

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
    assert wall_at(model, 1, BIG) == pytest.approx(1.5 + 8.0 + 2.0)
    # N = 16: 64 tasks (4 per rank), 4 per rank of 1000/64 frames each; one open; log2(16) = 4 stages
    t = terms_at(model, 16, BIG)
    q_frames = 4 * 1000 / 64
    assert t.read == pytest.approx(q_frames * MB * 8.0 / (1000 * MB))
    assert t.compute == pytest.approx(q_frames * 2.0 / 1000)
    assert t.metadata == pytest.approx(model.open_s)
    # the job down the broadcast tree (4 stages), no partials (the report measured none): the launcher's
    # half of each move alone, the 16 ranks' half side by side, at the default 1 GB/s
    assert t.communication == pytest.approx(4 * model.alpha_s + 4 * model.job_bytes * 1e-9 * (0.5 + 0.5 / 16))
    expected = 1.5 + model.imports_s + model.open_s + 10.0 / 16 + t.communication
    assert wall_at(model, 16, BIG) == pytest.approx(expected)


def _with_payload(report, job_bytes: int, partial_bytes: int, per_frame: bool):
    report.meta = dataclasses.replace(report.meta, payload=Payload(job_bytes, partial_bytes, report.n_frames,
                                                                   per_frame))
    return report


@pytest.mark.parametrize("per_frame", [False, True])
def test_moved_bytes_follow_each_executor_and_the_measured_transfer_rate(per_frame):
    """A pool sends the job with each task and gets each task's partial back; Dask sends the job once per
    worker; MPI broadcasts the job down its tree and gathers a partial per rank (per-frame rows: once)."""
    job, part = 3 * MB, 5 * MB
    r = _with_payload(_serial(), job, part, per_frame)
    machine = Machine(nodes=1, cores_per_node=4, transfer_s_per_byte=2e-9)
    n, tasks = 8, 32   # 4 tasks per worker
    task_part = part / tasks if per_frame else part
    want = {"processes": tasks * (job + task_part),
            "dask": n * job + tasks * task_part,
            "mpi": 3 * job + (part if per_frame else n * part)}
    for target, moved in want.items():
        model = fit(r, target)
        assert (model.job_bytes, model.partial_bytes, model.partial_per_frame) == (job, part, per_frame)
        t = terms_at(model, n, machine)
        assert t.communication == pytest.approx(3 * model.alpha_s + moved * 2e-9 * (0.5 + 0.5 / 4))
        assert terms_at(model, 1, machine).communication == 0.0   # one process moves nothing


def test_a_larger_payload_predicts_a_slower_pool_and_says_where_it_came_from():
    small = fit(_with_payload(_serial(), 10_000, 10_000, False), "processes")
    large = fit(_with_payload(_serial(), 10 * MB, 10 * MB, False), "processes")
    machine = Machine(nodes=1, cores_per_node=4)
    assert wall_at(large, 8, machine) > wall_at(small, 8, machine) + 32 * 19.9 * MB * 1e-9 * 0.5
    rows = {w: (v, o) for w, v, o in machine.assumptions()}
    assert rows["moving a pickled object between processes"] == ("1 GB/s", "defaulted")
    measured = Machine(nodes=1, cores_per_node=4, transfer_s_per_byte=4e-9,
                       origin=(("transfer_s_per_byte", "measured by trajscale probe on vm"),))
    rows = {w: (v, o) for w, v, o in measured.assumptions()}
    assert rows["moving a pickled object between processes"] == ("0.25 GB/s", "measured by trajscale probe on vm")


def test_storage_bandwidth_caps_reads_and_is_named_the_limit():
    model = fit(_serial(imports=0.1, topology=0.05), "mpi")   # one rank reads 1 GB in 8 s: 0.125 GB/s
    machine = Machine(nodes=1, cores_per_node=64, storage_gbps=1.0)
    t = terms_at(model, 64, machine)
    # 64 ranks share 1 GB/s: each reads its 1/64 GB at 1/64 GB/s, 1 s, not 8/64 s
    assert t.read == pytest.approx((1000 * MB / 64) / (1e9 / 64))
    pred = predict_model(model, [64], machine)[0]
    assert pred.limit == "storage bandwidth"
    assert pred.efficiency < 0.5


def test_metadata_server_serialises_opens():
    model = fit(_serial(), "mpi")
    t = terms_at(model, 128, Machine(nodes=1, cores_per_node=128, metadata_ms=2.0))
    assert t.metadata == pytest.approx(128 * 1 * 2.0e-3)


def test_fixed_task_count_caps_the_speedup():
    r = _serial(imports=0.1, topology=0.05, n_tasks=8)
    r.meta = dataclasses.replace(r.meta, n_tasks_asked=8)   # the run fixed its tasks (--tasks 8): 8 at every N
    model = fit(r, "mpi")
    preds = predict_model(model, [8, 64], BIG)
    assert preds[0].n_tasks == preds[1].n_tasks == 8
    # 64 ranks run no faster than 8 (beyond the log2 N communication)
    assert preds[1].t_wall >= preds[0].t_wall
    assert preds[1].limit == "too few tasks or chunks"


def test_chunks_cap_the_task_count():
    # 1000 frames in chunks of 100: 10 tasks at most
    model = fit(_serial(chunks=100, imports=0.1, topology=0.05), "mpi")
    assert model.max_tasks == 10
    assert predict_model(model, [128], BIG)[0].n_tasks == 10
    assert predict_model(model, [128], BIG)[0].limit == "too few tasks or chunks"


def test_efficiency_threshold_is_the_first_n_below_0_7():
    model = fit(_serial(), "mpi")
    n = efficiency_threshold(model, BIG)
    w1 = wall_at(model, 1, BIG)
    assert w1 / wall_at(model, n, BIG) / n < 0.7 <= w1 / wall_at(model, n - 1, BIG) / (n - 1)


def test_a_read_straggler_in_the_report_slows_every_larger_prediction():
    even = make_report([{"t_io": 2.0}, {"t_io": 2.0}, {"t_io": 2.0}, {"t_io": 2.0}])
    slow = make_report([{"t_io": 2.0}, {"t_io": 2.0}, {"t_io": 2.0}, {"t_io": 8.0}])
    m_even, m_slow = fit(even, ran_on=BIG), fit(slow, ran_on=BIG)
    assert m_slow.slow_read == pytest.approx(4.0) and "rank 3" in m_slow.straggler
    assert m_even.straggler == ""
    for n in (16, 128):
        excess = terms_at(m_slow, n, BIG).straggler
        assert excess == pytest.approx(3 * terms_at(m_slow, n, BIG).read)   # its read share at 4x the rate
        assert wall_at(m_slow, n, BIG) == pytest.approx(wall_at(m_even, n, BIG) + excess)


# -- the command ------------------------------------------------------------------------------------

def _write(tmp_path, report, name="r.json"):
    path = tmp_path / name
    report.write(path)
    return path


def test_cli_predict_prints_the_table_and_writes_json(tmp_path):
    path = _write(tmp_path, _serial(imports=0.1, topology=0.05))
    out = tmp_path / "pred.json"
    proc = run_cli_here("report", str(path), "--predict", "2,16,128", "--storage-gbps", "1", "--metadata-ms", "1",
                        "--nodes", "4", "--cores-per-node", "32", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "E(N) falls below 0.7 at N =" in proc.stdout
    preds = json.loads(out.read_text())["predictions"]
    assert [p["n"] for p in preds] == [2, 16, 128]
    assert set(preds[0]) == {"n", "t_wall", "t_low", "t_high", "speedup", "efficiency", "limit"}
    model = fit(_serial(imports=0.1, topology=0.05), "mpi")
    machine = Machine(nodes=4, cores_per_node=32, storage_gbps=1.0, metadata_ms=1.0)
    for p in preds:
        assert p["t_wall"] == pytest.approx(wall_at(model, p["n"], machine), rel=1e-9)
        assert p["efficiency"] == pytest.approx(p["speedup"] / p["n"])
    assert preds[-1]["limit"] == "storage bandwidth"


def test_cli_json_out_refuses_an_input_and_an_existing_file(tmp_path):
    path = _write(tmp_path, _serial())
    before = path.read_bytes()
    proc = run_cli_here("report", str(path), "--predict", "2", "--json", str(path))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and str(path) in proc.stderr
    assert path.read_bytes() == before
    other = tmp_path / "exists.json"
    other.write_text("keep")
    proc = run_cli_here("report", str(path), "--predict", "2", "--json", str(other))
    assert proc.returncode != 0 and "--overwrite" in proc.stderr and other.read_text() == "keep"
    proc = run_cli_here("report", str(path), "--predict", "2", "--json", str(other), "--overwrite")
    assert proc.returncode == 0 and json.loads(other.read_text())["predictions"][0]["n"] == 2


@pytest.mark.parametrize("bad", ["0", "two", "2,,x"])
def test_cli_refuses_bad_rank_counts(tmp_path, bad):
    path = _write(tmp_path, _serial())
    proc = run_cli_here("report", str(path), "--predict", bad)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_levers_say_what_moves_the_efficiency_point():
    """Chunks of 100 frames allow 10 tasks: rechunking to one-frame chunks moves the E < 0.7 point up;
    fixing the task count is the other lever for a run that fixed it."""
    from trajscale.report.predict import levers

    model = fit(_serial(chunks=100, imports=0.1, topology=0.05), "mpi")
    base = efficiency_threshold(model, BIG)
    moved = dict(levers(model, BIG))
    layout = next(k for k in moved if k.startswith("layout"))
    assert moved[layout] > base
    assert not any(k.startswith("task count") for k in moved)   # the run did not fix its task count
    r = _serial(imports=0.1, topology=0.05, n_tasks=8)
    r.meta = dataclasses.replace(r.meta, n_tasks_asked=8)
    fixed = fit(r, "mpi")
    moved = dict(levers(fixed, BIG))
    assert moved["task count: `--tasks` unset (4 tasks per rank)"] > efficiency_threshold(fixed, BIG)
