"""The report's plot, text, table and trace agree, show the run from process start, and say when a run
is too short to diagnose (issues 23 and 24). Hand-made reports with known answers."""

from __future__ import annotations

import dataclasses

import pytest

from tests.report._synth import make_report
from tests.report.test_outputs import check_trace
from trajscale.report import diagnose
from trajscale.report.summary import short_report
from trajscale.report.table import format_table
from trajscale.report.trace import build_trace

T0 = 1_700_000_000.0
PROCESS_PHASES = ("imports", "mpi_init", "topology", "prepare", "pool_start", "tasks", "reduce", "write")


@pytest.fixture()
def axes():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    yield fig, ax
    plt.close(fig)


def _drawn(ax):
    """(straggler line y or None, {x centre: top of the wide bar there}) from the artists on ``ax``."""
    lines = [ln for ln in ax.lines if len(set(ln.get_ydata())) == 1]
    limit = float(lines[0].get_ydata()[0]) if lines else None
    tops: dict[int, float] = {}
    for patch in ax.patches:
        if patch.get_width() > 0.3:   # the stacked bars; the thin hatched ones beside are not compared
            x = round(patch.get_x() + patch.get_width() / 2)
            tops[x] = max(tops.get(x, 0.0), patch.get_y() + patch.get_height())
    return limit, tops


CASES = {
    # issue 24: rank 0 also loads the topology for the job: its bar stood above the line while the
    # text said 0 stragglers
    "one-off topology": [{"t_init_top": 3.0}, {}, {}, {}],
    "one-off topology, the others waiting for it": [{"t_init_top": 3.0}, {"t_wait": 3.0}, {"t_wait": 3.0},
                                                    {"t_wait": 3.0}],
    "a straggler in I/O beside it": [{"t_init_top": 3.0}, {}, {}, {"t_io": 8.0}],
    # issue 23: rank 2 starts 6 s late and the others wait for it at the barrier
    "a slow start": [{"t_wait": 6.0}, {"t_wait": 6.0}, {"t_start": 6.0}, {"t_wait": 6.0}],
}


@pytest.mark.parametrize("case", CASES)
def test_a_bar_above_the_straggler_line_is_a_straggler_in_the_text(case, axes):
    from trajscale.report import plots

    r = make_report(CASES[case])
    plots._bar_panel(axes[1], r, legend=True)
    limit, tops = _drawn(axes[1])
    assert limit is not None and len(tops) == 4
    above = {f"rank {x}" for x, top in tops.items() if top > limit}
    text = format_table(r)
    named = {s.name for s in diagnose(r).stragglers}
    assert above == named
    for x in range(4):
        row = next(ln for ln in text.splitlines() if ln.startswith(f"rank {x}"))
        assert (" *" in row) == (f"rank {x}" in above)
    assert above == {"a straggler in I/O beside it": {"rank 3"}, "a slow start": {"rank 2"}}.get(case, set())


def test_scaling_points_of_each_executor_are_one_series(axes):
    from trajscale.report import plots

    reps = [make_report(n_workers=1, t_total=8.0, executor="serial"),
            make_report(n_workers=2, t_total=4.0, executor="processes"),
            make_report(n_workers=4, t_total=2.5, executor="processes"),
            make_report(n_workers=2, t_total=5.0, executor="mpi"),
            make_report(n_workers=4, t_total=3.2, executor="mpi")]
    fig, ax_s = axes
    ax_e = fig.add_subplot(2, 1, 2)
    series = plots._scaling_panels(ax_s, ax_e, reps, None)
    assert series == {"serial": [(1, 1.0)], "processes": [(2, 2.0), (4, 8.0 / 2.5)],
                      "mpi": [(2, 8.0 / 5.0), (4, 8.0 / 3.2)]}
    for ax in (ax_s, ax_e):
        drawn = {ln.get_label(): list(ln.get_xdata()) for ln in ax.lines if not ln.get_label().startswith("_")}
        assert drawn["processes"] == [2, 4] and drawn["mpi"] == [2, 4] and drawn["serial"] == [1]
    mpi_s = next(ln for ln in ax_s.lines if ln.get_label() == "mpi")
    assert list(mpi_s.get_ydata()) == pytest.approx([1.6, 2.5])


def _short_report():
    # 0.03 s tasks; rank 3 three times slower: a straggler and imbalance read from noise
    ws = [{"t_init_traj": 0.001, "t_io": 0.01, "t_compute": 0.02, "t_comm": 0.001} for _ in range(4)]
    ws[3] = {"t_init_traj": 0.001, "t_io": 0.07, "t_compute": 0.02, "t_comm": 0.001}
    return make_report(ws, t_total=0.12)


def test_a_run_too_short_to_diagnose_gets_one_line():
    r = _short_report()
    d = diagnose(r)
    assert d.too_short
    assert d.stragglers == [] and d.task_stragglers == []
    assert [a.rule for a in d.advice] == ["too-short"]
    lines = short_report(r, d).splitlines()
    assert len(lines) == 1 and "too short to diagnose" in lines[0]
    text = format_table(r, d)
    assert "stragglers: none" in text and "*" not in text
    assert "use more tasks" not in text and "good scaling" not in text


def test_a_short_run_still_names_a_slow_start(axes):
    ws = [{"t_init_traj": 0.001, "t_io": 0.01, "t_compute": 0.02} for _ in range(4)]
    ws[1] = {**ws[1], "t_start": 3.0}
    r = make_report(ws)
    d = diagnose(r)
    assert d.too_short and [(s.name, s.cause) for s in d.stragglers] == [("rank 1", "start-up")]
    assert "rank 1 slow in start-up" in short_report(r, d)
    assert [a.rule for a in d.advice] == ["too-short", "init-stragglers"]
    from trajscale.report import plots

    info = plots._bar_panel(axes[1], r, legend=False)
    assert info["limit"] is None and info["stragglers"] == ["rank 1"]   # no line for a run not diagnosed
    assert not [ln for ln in axes[1].lines]


def _with_process(r, imports=0.8):
    """``r`` as a run whose launching process started ``imports`` s before its first task."""
    phases = dict.fromkeys(PROCESS_PHASES, 0.0)
    phases.update(imports=imports, mpi_init=0.1, topology=0.3, prepare=0.05, tasks=2.2, reduce=0.01, write=0.02)
    begin = T0 - imports - 0.45
    wall = sum(phases.values())
    r.process = {"t_wall": wall, "phases": phases, "origin": "process start", "t_begin": begin,
                 "t_end": begin + wall, "pid": 1000}
    r.workers = [dataclasses.replace(w, t_start=imports + 0.1, t_ready=begin + imports + 0.1) for w in r.workers]
    return r


def test_trace_shows_the_launching_process_and_each_start_up_from_process_start():
    r = _with_process(make_report(n_workers=2))
    trace = build_trace(r)
    tracks = check_trace(trace)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    proc_pid = next(p for p, n in names.items() if n.startswith("launching process"))
    slices = tracks[(proc_pid, 0)]
    assert [s["name"] for s in slices][:2] == ["interpreter and imports", "MPI init"]
    assert slices[0]["ts"] == 0   # the trace starts at the process's start
    assert sum(s["dur"] for s in slices) == pytest.approx(r.process["t_wall"] * 1e6, abs=10)
    for pid in names:
        if pid != proc_pid:
            first = tracks[(pid, 0)][0]
            assert first["name"] == "start-up" and first["ts"] == 0
            assert first["dur"] == pytest.approx(0.9e6, abs=10)


def test_table_and_summary_show_the_process_phases():
    r = _with_process(make_report(n_workers=2))
    text = format_table(r)
    assert f"process: {r.process['t_wall']:.3f} s wall from its start; the phases below cover 100 %" in text
    assert "interpreter and imports  0.800" in text
    header = next(ln for ln in text.splitlines() if ln.startswith("worker"))
    assert header.split()[6] == "start"
    row = next(ln for ln in text.splitlines() if ln.startswith("rank 1"))
    assert row.split()[7] == "0.900"   # ("rank", "1", host, pid, tasks, frames, MB, start)
    assert "interpreter and imports 0.80" in str(r)
