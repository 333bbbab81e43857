"""Outputs of a run report: text table, Chrome trace, plots and the ``trajscale report`` CLI."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import pytest

from tests.conftest import run_cli_here
from tests.report._synth import make_report
from trajscale.report import diagnose
from trajscale.report.table import format_scaling, format_table
from trajscale.report.timing import PHASES
from trajscale.report.trace import build_trace, write_trace

WORKER_PHASES = ("t_start", *PHASES)   # a worker's bars: its start-up, then the task phases

# ---------------------------------------------------------------- table


def test_table_has_rows_totals_derived_stragglers_advice():
    ws = [{} for _ in range(4)]
    ws[2] = {"t_comm": 5.0}
    r = make_report(ws, source={"format": "DCD", "path": "adk.dcd"}, t_total=8.0)
    text = format_table(r)
    for name in ("rank 0", "rank 1", "rank 2 *", "rank 3", "sum"):
        assert name in text
    for word in ("init_traj", "compute", "comm", "R_comp/IO", "R_comp/comm", "frames/s", "imbalance",
                 "stragglers (1 workers", "slow in t_comm", "advice:", "fewer, larger"):
        assert word in text, word
    sum_row = next(ln for ln in text.splitlines() if ln.startswith("sum"))
    assert f"{sum(w.t_total for w in r.workers):.3f}" in sum_row


def test_table_with_baseline_and_no_advice():
    base = make_report(n_workers=1, t_total=8.0)
    r = make_report([{"t_compute": 1.0, "t_io": 1.0}] * 4, t_total=2.5)
    text = format_table(r, diagnose(r, base))
    assert "S(N)     3.20" in text and "E(N) 0.80" in text
    assert "stragglers: none" in text and "advice: none" in text


def test_scaling_table():
    reps = [make_report(n_workers=n, t_total=t) for n, t in ((1, 8.0), (2, 4.0), (4, 2.5))]
    lines = format_scaling(reps).splitlines()
    assert "mpi N=1" in lines[0]
    assert lines[-1].split() == ["mpi", "4", "2.500", "3.20", "0.80"]


def test_scaling_table_labels_rows_by_executor():
    # issue 17: processes and MPI runs at N=2 were two unlabeled "2" rows
    reps = [make_report(n_workers=1, t_total=8.0, executor="serial"),
            make_report(n_workers=2, t_total=4.0, executor="processes"),
            make_report(n_workers=2, t_total=5.0, executor="mpi")]
    rows = [ln.split() for ln in format_scaling(reps).splitlines()[3:]]
    assert sorted((r[0], r[1]) for r in rows) == [("mpi", "2"), ("processes", "2"), ("serial", "1")]
    assert next(r for r in rows if r[0] == "mpi")[3] == f"{8.0 / 5.0:.2f}"


# ---------------------------------------------------------------- trace


def check_trace(trace: dict) -> dict[tuple[int, int], list[dict]]:
    """Validate Chrome trace-event JSON; return the X slices per (pid, tid) track."""
    assert set(trace) >= {"traceEvents", "displayTimeUnit"}
    assert trace["displayTimeUnit"] in ("ms", "ns")
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    named: set[tuple[int, int]] = set()
    procs: set[int] = set()
    for ev in trace["traceEvents"]:
        for key in ("ph", "ts", "pid", "tid", "name"):
            assert key in ev, (key, ev)
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        assert isinstance(ev["ts"], int | float) and ev["ts"] >= 0
        if ev["ph"] == "M":
            assert ev["name"] in ("process_name", "thread_name", "process_sort_index")
            if ev["name"] == "thread_name":
                named.add((ev["pid"], ev["tid"]))
            if ev["name"] == "process_name":
                procs.add(ev["pid"])
                assert ev["args"]["name"]
        else:
            assert ev["ph"] == "X"
            assert isinstance(ev["dur"], int | float) and ev["dur"] >= 0
            tracks[(ev["pid"], ev["tid"])].append(ev)
    for key, evs in tracks.items():
        assert key in named and key[0] in procs, key
        ts = [e["ts"] for e in evs]
        assert ts == sorted(ts), key                                  # monotonic
        for a, b in itertools.pairwise(evs):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, (a, b)      # no overlap (1 ns rounding)
    json.loads(json.dumps(trace, allow_nan=False))
    return dict(tracks)


def test_trace_one_track_per_worker_one_slice_per_phase():
    r = make_report(n_workers=3, tasks_per_worker=2, gap=0.05)
    tracks = check_trace(build_trace(r))
    assert sorted(tracks) == [(1, 0), (2, 0), (3, 0)]
    for evs in tracks.values():
        names = [e["name"] for e in evs]
        # 2 tasks x (init_traj, io, compute), then the worker's comm (wait is 0)
        assert names == ["init_traj", "io", "compute"] * 2 + ["comm"]
        assert evs[0]["dur"] == pytest.approx(0.05e6)               # 0.1 s over 2 tasks, in us
        assert evs[3]["ts"] == pytest.approx(evs[0]["ts"] + 1.05e6 + 0.05e6)   # second task after the gap
    assert min(e["ts"] for evs in tracks.values() for e in evs) == 0


def test_trace_worker_level_phases_and_overlapping_task_clocks():
    # t_begin all equal (a clock that did not move): tasks are laid end to end, never overlapping
    r = make_report([{"t_init_top": 0.5, "t_wait": 0.2}, {}], tasks_per_worker=3)
    r.tasks = [t.__class__(**{**{f: getattr(t, f) for f in t.__slots__}, "t_begin": 0.0, "t_end": 0.0})
               for t in r.tasks]
    tracks = check_trace(build_trace(r))
    names0 = [e["name"] for e in tracks[(1, 0)]]
    assert names0[0] == "init_top" and names0[-2:] == ["wait", "comm"]
    assert "init_top" not in [e["name"] for e in tracks[(2, 0)]]


def test_trace_scheduler_track_and_file(tmp_path):
    r = make_report(n_workers=2, sched=True, executor="dask")
    path = tmp_path / "trace.json"
    write_trace(r, path)
    trace = json.loads(path.read_text())
    tracks = check_trace(trace)
    assert sorted(tracks) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert all(e["name"] == "scheduler" for e in tracks[(1, 1)]) and len(tracks[(1, 1)]) == 2
    names = {ev["args"]["name"] for ev in trace["traceEvents"] if ev["name"] == "thread_name"}
    assert names == {"tasks", "scheduler"}


def test_trace_of_several_reports():
    reps = [make_report(n_workers=2), make_report(n_workers=3)]
    tracks = check_trace(build_trace(reps))
    assert len({pid for pid, _ in tracks}) == 5


# ---------------------------------------------------------------- plots


@pytest.fixture()
def plots():
    pytest.importorskip("matplotlib")
    from trajscale.report import plots

    return plots


def test_plot_one_report(plots, tmp_path):
    r = make_report(_ws := [{} for _ in range(5)])
    out = tmp_path / "rep.png"
    info = plots.plot_report([r], out)
    assert out.is_file() and out.stat().st_size > 1000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert info["n_bars"] == len(_ws) * len(WORKER_PHASES)
    assert info["n_axes"] == 1
    assert not list(tmp_path.glob("*.tmp*")) and len(list(tmp_path.iterdir())) == 1


def test_plot_several_reports_adds_scaling(plots, tmp_path):
    reps = [make_report(n_workers=n, t_total=8.0 / n) for n in (4, 1, 2)]
    out = tmp_path / "scaling.png"
    info = plots.plot_report(reps, out)
    assert out.is_file() and out.stat().st_size > 1000
    assert info["bars_per_panel"] == [n * len(WORKER_PHASES) for n in (1, 2, 4)]
    assert info["n_axes"] == 3 + 2          # one bar panel per report, S(N) and E(N)
    info = plots.plot_report([reps[0]], tmp_path / "base.svg", baseline=reps[1])
    assert info["n_axes"] == 3 and (tmp_path / "base.svg").read_text().lstrip().startswith("<?xml")


# ---------------------------------------------------------------- CLI


@pytest.fixture()
def report_files(tmp_path):
    paths = {}
    for n in (1, 2, 4):
        ws = [{} for _ in range(n)]
        if n == 4:
            ws[1] = {"t_init_traj": 6.0}
        p = tmp_path / f"rep{n}.json"
        make_report(ws, t_total=10.0 / n, source={"format": "DCD", "path": "adk.dcd"}).write(p)
        paths[n] = p
    return paths


def test_cli_report_good(report_files, tmp_path):
    proc = run_cli_here("report", str(report_files[4]))
    assert proc.returncode == 0, proc.stderr
    assert "rank 1 *" in proc.stdout and "advice:" in proc.stdout and "split the trajectory" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_cli_report_several_with_outputs(report_files, tmp_path):
    pytest.importorskip("matplotlib")
    png, trace = tmp_path / "out.png", tmp_path / "trace.json"
    proc = run_cli_here("report", str(report_files[2]), str(report_files[4]), "--baseline", str(report_files[1]),
                        "--plot", str(png), "--trace", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert "scaling relative to mpi N=1" in proc.stdout and "S(N)" in proc.stdout
    assert png.stat().st_size > 1000
    check_trace(json.loads(trace.read_text()))
    proc = run_cli_here("report", str(report_files[2]), str(report_files[4]), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["reports"]) == 2 and [p["n_workers"] for p in out["scaling"]] == [2, 4]
    assert out["reports"][1]["diagnosis"]["stragglers"][0]["component"] == "t_init_traj"


def test_cli_report_help():
    proc = run_cli_here("report", "--help")
    assert proc.returncode == 0 and "--baseline" in proc.stdout and "straggler" in proc.stdout


@pytest.mark.parametrize("content", [None, b"\x00\x01garbage\xff", b"{not json", b"[1, 2, 3]", b'"hello"',
                                     b'{"analysis": "rmsd"}', (b'{"analysis": "x", "executor": "mpi", '
                                     b'"n_workers": 1, "n_frames": 1, "n_atoms": 1, "source": {}, '
                                     b'"t_total": "slow", "tasks": [7]}')])
def test_cli_report_bad_file(tmp_path, content):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_bytes(content)
    proc = run_cli_here("report", str(path))
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and str(path) in errors[0], proc.stderr


def test_report_json_carries_the_diagnosis(tmp_path):
    """The JSON has the derived numbers, stragglers and advice beside the raw timings."""
    import json

    from trajscale.report.timing import RunReport

    rep = make_report([{}, {}, {}, {"t_io": 6.0}])   # rank 3 is a straggler in t_io
    path = tmp_path / "r.json"
    rep.write(path)
    d = json.loads(path.read_text())["diagnosis"]
    compute = sum(t.t_compute for t in rep.tasks)
    io = sum(t.t_io for t in rep.tasks)
    assert d["r_comp_io"] == pytest.approx(compute / io)
    assert [s["name"] for s in d["stragglers"]] == ["rank 3"]
    assert d["stragglers"][0]["component"] == "t_io"
    assert d["advice"] and all({"rule", "message", "reason"} <= set(a) for a in d["advice"])
    again = RunReport.load(path)                       # the extra key does not break loading
    assert again.to_dict() == rep.to_dict(diagnosis=False)
