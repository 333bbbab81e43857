"""The machine in every prediction: oversubscription, the assumptions block, and fits from several reports.

References are computed here by hand in float64 from the documented equations (docs/scaling.md), never
from the model's own output.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tests.conftest import run_cli, run_cli_here
from tests.report._synth import make_report
from tests.report.test_predict import _serial
from trajscale.report.machine import Machine, this_machine
from trajscale.report.predict import fit, fit_reports, predict_model, terms_at, wall_at

TWO = Machine(name="two-core", nodes=1, cores_per_node=2)
BIG = Machine(name="big", nodes=1, cores_per_node=1024)


def test_workers_beyond_the_cores_share_them():
    """processes(16) on 2 cores: each worker's compute at 16/2 = 8 times its own-core cost."""
    model = fit(_serial(t_io=0.0, t_compute=2.0, frames=1000, imports=0.1, topology=0.05), "processes", ran_on=BIG)
    t = terms_at(model, 16, TWO)
    tasks = min(4 * 16, 1000)
    q = np.ceil(np.float64(tasks) / 16)
    ref = q * np.float64(1000) / tasks * (np.float64(2.0) / 1000) * (np.float64(16) / 2)
    assert t.compute == pytest.approx(float(ref), rel=1e-12)
    assert t.oversubscription == 8.0
    assert wall_at(model, 16, TWO) > wall_at(model, 2, TWO)
    assert predict_model(model, [16], TWO)[0].limit == "cores (oversubscribed)"


@pytest.mark.parametrize("cores", [1, 2, 4])
def test_no_prediction_is_faster_than_the_cores_allow(cores):
    """The work (2 s of compute, 8 s of reads from one rank) over ``cores`` cores is a floor at every N."""
    machine = Machine(nodes=1, cores_per_node=cores)
    model = fit(_serial(t_io=8.0, t_compute=2.0, frames=1000, imports=0.1, topology=0.05), "processes",
                ran_on=BIG)
    floor = np.float64(10.0) / cores
    for n in (1, 2, 3, 4, 8, 16, 64):
        t = terms_at(model, n, machine)
        assert t.read + t.compute >= float(floor) * (1 - 1e-12) or n < cores, (n, t)
        assert t.total >= float(floor) * (1 - 1e-12) * min(1.0, n / cores)


def test_this_machine_is_measured():
    import os

    m = this_machine()
    assert m.cores == len(os.sched_getaffinity(0))
    assert m.threads_per_core >= 1 and m.memory_bytes > 0
    assert m.origin_of("cores_per_node").startswith("measured")


def test_profile_round_trips():
    m = Machine(name="x", nodes=3, cores_per_node=24, read_curve=((1, 1e9), (4, 3e9)), block_bytes=4 << 20,
                start_s=(("mpi", 0.4),), origin=(("read_curve", "measured"),))
    assert Machine.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    # between measured reader counts the curve interpolates, beyond them it stays at the largest rate
    assert m.read_bps(2) == pytest.approx(1e9 + 2e9 / 3)
    assert m.read_bps(64) == pytest.approx(3e9)


def _report_at(n: int, c: float, r: float, frames_per_task: int = 50, bytes_per_frame: int = 1000):
    """A report of 2 tasks per worker on ``n`` workers, each spending ``c`` s a frame and ``r`` s a byte."""
    frames = 2 * frames_per_task
    return make_report([{"t_compute": frames * c, "t_io": frames * bytes_per_frame * r, "t_comm": 0.0}] * n,
                       tasks_per_worker=2, frames_per_task=frames_per_task, bytes_per_frame=bytes_per_frame,
                       executor="serial" if n == 1 else "mpi")


def test_several_reports_recover_per_worker_costs_growing_with_n():
    c0, cg = 2e-3, 1e-4     # compute: 2 ms a frame, 0.1 ms more for each further worker
    r0, rg = 1e-8, 5e-10    # reads: 100 MB/s, slower by 5 % of that per further worker
    reports = [_report_at(n, c0 + cg * (n - 1), r0 + rg * (n - 1)) for n in (1, 2, 4)]
    model = fit_reports(reports, "mpi", ran_on=BIG)
    assert model.compute_s_per_frame == pytest.approx(c0, rel=1e-9)
    assert model.compute_growth == pytest.approx(cg, rel=1e-9)
    assert model.read_s_per_byte == pytest.approx(r0, rel=1e-9)
    assert model.read_growth == pytest.approx(rg, rel=1e-9)
    assert model.fitted_from == (1, 2, 4)
    # at N = 8 the per-frame cost is c0 + 7 cg (hand-computed), not the serial c0
    t = terms_at(model, 8, BIG)
    q = np.ceil(np.float64(32) / 8)
    frames = np.float64(sum(x.frames for x in reports[0].tasks))
    assert t.compute == pytest.approx(float(q * frames / 32 * (c0 + 7 * cg)), rel=1e-9)
    one = fit(reports[0], "mpi", ran_on=BIG)
    assert wall_at(model, 8, BIG) > wall_at(one, 8, BIG)


def test_a_run_oversubscribed_when_measured_is_fitted_per_core():
    """4 workers on 2 cores each measured twice their own-core cost: the fit undoes it."""
    rep = _report_at(4, 2 * 2e-3, 2 * 1e-8)
    assert fit(rep, "mpi", ran_on=TWO).compute_s_per_frame == pytest.approx(2e-3)
    assert fit(rep, "mpi", ran_on=BIG).compute_s_per_frame == pytest.approx(4e-3)


def test_the_range_holds_the_prediction_and_widens_with_the_inputs_spread():
    reports = [_report_at(1, 2e-3, 1e-8), _report_at(2, 2.6e-3, 1e-8), _report_at(4, 2.2e-3, 1e-8)]
    p = predict_model(fit_reports(reports, "mpi", ran_on=BIG), [8], BIG)[0]
    assert p.t_low < p.t_wall < p.t_high


# -- the command -------------------------------------------------------------------------------------

@pytest.mark.cli
def test_cli_prints_and_writes_the_assumptions(tmp_path):
    path = tmp_path / "r.json"
    _serial(imports=0.1, topology=0.05).write(path)
    out = tmp_path / "pred.json"
    proc = run_cli("report", str(path), "--predict", "2,16", "--as", "processes", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "assumptions:" in proc.stdout
    assert "cores per node" in proc.stdout and "[measured on" in proc.stdout and "[defaulted]" in proc.stdout
    data = json.loads(out.read_text())
    rows = {r["what"]: r for r in data["assumptions"]["rows"]}
    assert rows["cores per node"]["origin"].startswith("measured")
    assert data["assumptions"]["machine"]["cores_per_node"] == this_machine().cores_per_node
    proc = run_cli_here("report", str(path), "--predict", "64", "--nodes", "2", "--cores-per-node", "16",
                        "--json", "-")
    rows = {r["what"]: r for r in json.loads(proc.stdout)["assumptions"]["rows"]}
    assert rows["cores per node"] == {"what": "cores per node", "value": "16", "origin": "given"}
    assert rows["nodes"]["origin"] == "given"


def test_cli_machine_profile_and_a_bad_one(tmp_path):
    path = tmp_path / "r.json"
    _serial(imports=0.1, topology=0.05).write(path)
    prof = tmp_path / "m.json"
    Machine(name="cluster", nodes=8, cores_per_node=32, read_curve=((1, 1e9), (8, 4e9)),
            origin=(("read_curve", "measured"),)).write(prof)
    proc = run_cli_here("report", str(path), "--predict", "256", "--machine", str(prof), "--json", "-")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["assumptions"]["machine"]["nodes"] == 8
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "trajscale machine profile", "nodes": 0}')
    proc = run_cli_here("report", str(path), "--predict", "2", "--machine", str(bad))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and str(bad) in proc.stderr


def test_a_calibrated_launch_line_is_what_starting_the_workers_costs():
    """``at_cores + per_worker x (W - C) / C`` with W the workers started; MPI ranks opening one H5MD file
    collectively add their share; MPI's serial phases on rank 0 do not stretch beyond the cores (the other
    ranks wait for it asleep)."""
    from trajscale.report.machine import LaunchLine
    from trajscale.report.predict import launch_at

    lines = (LaunchLine("processes", 0.1, 0.04), LaunchLine("mpi", 0.2, 0.15, 0.05), LaunchLine("dask", 1.0, 0.7))
    machine = Machine(name="two", nodes=1, cores_per_node=2, launch=lines)
    assert Machine.from_dict(json.loads(json.dumps(machine.to_dict()))) == machine
    serial = _serial(t_io=0.0, t_compute=2.0, frames=1000, imports=0.1, topology=0.05)   # an H5MD file
    for n in (2, 4, 16):
        beyond = np.float64(max(0, n - 2)) / 2
        assert launch_at(fit(serial, "dask", ran_on=BIG), n, machine)[0] == pytest.approx(1.0 + 0.7 * beyond)
        assert launch_at(fit(serial, "mpi", ran_on=BIG), n, machine)[0] == pytest.approx(0.2 + 0.2 * beyond)
        mpi = terms_at(fit(serial, "mpi", ran_on=BIG), n, machine)
        assert mpi.fixed == pytest.approx(0.15)   # imports 0.1, topology 0.05
        assert terms_at(fit(serial, "processes", ran_on=BIG), n, machine).fixed == pytest.approx(0.15)
    # a pool forks a worker per task: a run of 3 tasks (--tasks 3) starts 3 workers however many are asked
    few = fit(_serial(t_io=0.0, t_compute=2.0, frames=999, n_tasks=3), "processes", ran_on=BIG)
    few = dataclasses.replace(few, tasks_fixed=True)
    assert launch_at(few, 16, machine)[0] == pytest.approx(0.1 + 0.04 * (3 - 2) / 2)
    # the assumptions block names the line and where it came from
    assert "processes 0.1 s up to the cores + 0.04 s per further worker" in machine.format_assumptions()


def test_oversubscribed_work_is_never_less_than_one_share_nor_than_the_cores_allow():
    """16 workers on 2 cores, 20 tasks: a worker with 2 tasks on a core of its own, or all work over 2 cores."""
    model = fit(_serial(t_io=0.0, t_compute=2.0, frames=1000, n_tasks=20), "processes", ran_on=BIG)
    model = dataclasses.replace(model, tasks_fixed=True, n_tasks=20, max_tasks=20)
    t = terms_at(model, 16, TWO)
    share = 2 * np.float64(1000) / 20 * (np.float64(2.0) / 1000)   # 2 tasks of 50 frames at 2 ms a frame
    assert t.compute == pytest.approx(float(max(np.float64(2.0) / 2, share)), rel=1e-12)


def test_the_range_spans_the_launch_lines_calibration():
    """A launch line known within x0.5 .. x1.5 per further worker: the range's ends are the wall with
    those factors on the per-worker seconds (and on the collective open's), nothing else changed."""
    from trajscale.report.machine import LaunchLine

    line = LaunchLine("mpi", 0.2, 0.3, 0.1, (0.5, 1.5))
    machine = Machine(name="two", nodes=1, cores_per_node=2, launch=(line,))
    assert Machine.from_dict(json.loads(json.dumps(machine.to_dict()))) == machine
    model = fit(_serial(t_io=0.0, t_compute=2.0, frames=1000, imports=0.1, topology=0.05), "mpi", ran_on=BIG)
    p = predict_model(model, [16], machine)[0]
    lo = Machine(name="two", nodes=1, cores_per_node=2, launch=(LaunchLine("mpi", 0.2, 0.15, 0.05),))
    hi = Machine(name="two", nodes=1, cores_per_node=2, launch=(LaunchLine("mpi", 0.2, 0.45, 0.15),))
    beyond = np.float64(16 - 2) / 2
    assert p.t_high - p.t_wall == pytest.approx(float((0.45 + 0.15 - 0.4) * beyond), rel=1e-9)
    assert p.t_wall - p.t_low == pytest.approx(float((0.4 - 0.2) * beyond), rel=1e-9)
    assert p.t_low == pytest.approx(wall_at(model, 16, lo)) and p.t_high == pytest.approx(wall_at(model, 16, hi))


def _parts_serial(frames: int = 1000, parts: int = 10):
    """A serial report of an XTC chain: ``parts`` files, no chunks."""
    r = make_report([{"t_io": 1.0, "t_compute": 1.0, "t_init_traj": 0.0, "t_comm": 0.0}], tasks_per_worker=1,
                    frames_per_task=frames, executor="serial",
                    source={"format": "xtc", "path": "chain", "n_segments": parts})
    r.process = {"t_wall": 2.5, "phases": {"imports": 0.3, "topology": 0.2, "tasks": 2.0}, "origin": "process start"}
    return r


def test_a_launch_line_costs_each_further_worker_by_format_and_selected_atoms():
    """``(per_worker + per_atom x atoms) x (W - C) / C``, with per_worker for one H5MD file or for parts."""
    from trajscale.report.machine import LaunchLine
    from trajscale.report.predict import launch_at

    line = LaunchLine("processes", 0.1, 0.04, per_atom_s=1e-6, per_worker_parts_s=0.01)
    machine = Machine(name="two", nodes=1, cores_per_node=2, launch=(line,))
    assert Machine.from_dict(json.loads(json.dumps(machine.to_dict()))) == machine
    h5md = dataclasses.replace(fit(_serial(t_io=0.0, t_compute=2.0), "processes", ran_on=BIG), atoms=50_000)
    parts = dataclasses.replace(fit(_parts_serial(), "processes", ran_on=BIG), atoms=214)
    beyond = np.float64(8 - 2) / 2
    assert launch_at(h5md, 8, machine)[0] == pytest.approx(float(0.1 + (0.04 + 1e-6 * 50_000) * beyond))
    assert launch_at(parts, 8, machine)[0] == pytest.approx(float(0.1 + (0.01 + 1e-6 * 214) * beyond))
    assert launch_at(parts, 2, machine)[0] == pytest.approx(0.1)   # up to the cores: the line's start alone
    assert "(parts: 0.01 s) + 1 us per selected atom per further worker" in machine.format_assumptions()


def test_a_chain_of_parts_may_have_a_task_per_frame():
    """Parts longer than a task's share are cut like one file: 10 parts of 100 frames allow 1000 tasks, so
    16 workers all get tasks (4 each), as ``trajscale run`` plans them."""
    model = fit(_parts_serial(frames=1000, parts=10), "processes", ran_on=BIG)
    assert model.max_tasks == 1000
    assert terms_at(model, 16, BIG).tasks == 64


def test_the_range_carries_the_lines_misses_of_its_own_runs():
    """A line that missed its calibration runs by x0.8 .. x1.25 widens every parallel prediction's range by
    those factors; the serial run's is untouched."""
    from trajscale.report.machine import LaunchLine

    exact = Machine(name="two", nodes=1, cores_per_node=2, launch=(LaunchLine("processes", 0.1, 0.04),))
    missed = dataclasses.replace(exact, launch=(LaunchLine("processes", 0.1, 0.04, wall_range=(0.8, 1.25)),))
    model = fit(_serial(t_io=0.0, t_compute=2.0, imports=0.1, topology=0.05), "processes", ran_on=BIG)
    (one, eight), (one_m, eight_m) = predict_model(model, [1, 8], exact), predict_model(model, [1, 8], missed)
    assert (one_m.t_low, one_m.t_high) == (one.t_low, one.t_high)
    assert eight_m.t_wall == eight.t_wall
    assert eight_m.t_low == pytest.approx(0.8 * eight.t_low) and eight_m.t_high == pytest.approx(1.25 * eight.t_high)
    with pytest.raises(ValueError):
        Machine.from_dict({**missed.to_dict(), "launch": {"processes": {"at_cores_s": 0.1, "per_worker_s": 0.04,
                                                                        "wall_range": [0.8]}}})
