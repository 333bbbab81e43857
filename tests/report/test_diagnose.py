"""Derived numbers, stragglers and every advice rule, on hand-made reports with known answers."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest

from tests.report._synth import make_report, on_cores
from trajscale.report import diagnose
from trajscale.report.advice import RULES, Advice, advise
from trajscale.report.metrics import ratio, scaling
from trajscale.report.runfacts import RunFacts
from trajscale.report.stragglers import find_stragglers
from trajscale.report.summary import short_report
from trajscale.report.table import format_table
from trajscale.report.timing import RunReport

# ---------------------------------------------------------------- derived numbers


def test_ratio_zero_denominators():
    assert ratio(6.0, 3.0) == 2.0
    assert ratio(1.0, 0.0) == math.inf
    assert ratio(0.0, 0.0) is None


def test_known_answers():
    # 2 workers x 2 tasks x 50 frames x 1000 bytes = 200 frames, 200 kB, in 4 s of wall time.
    r = make_report([{"t_compute": 2.0, "t_io": 1.0, "t_comm": 0.5}] * 2, t_total=4.0)
    d = diagnose(r)
    assert d.totals["t_compute"] == pytest.approx(4.0)
    assert d.totals["t_io"] == pytest.approx(2.0)
    assert d.totals["t_comm"] == pytest.approx(1.0)
    assert d.r_comp_io == pytest.approx(2.0)
    assert d.r_comp_comm == pytest.approx(4.0)
    assert d.frames == 200
    assert d.frames_per_s == pytest.approx(50.0)
    assert d.gb_per_s == pytest.approx(200_000 / 1e9 / 4.0)
    assert d.imbalance == pytest.approx(1.0)
    assert d.median_worker_time == pytest.approx(0.1 + 1.0 + 2.0 + 0.5)
    assert d.stragglers == [] and d.task_stragglers == []
    assert d.speedup is None and d.efficiency is None


def test_zero_io_and_comm_are_inf_or_none():
    d = diagnose(make_report([{"t_io": 0.0, "t_comm": 0.0}] * 2))
    assert d.r_comp_io == math.inf and d.r_comp_comm == math.inf
    d = diagnose(make_report([{"t_io": 0.0, "t_comm": 0.0, "t_compute": 0.0}] * 2))
    assert d.r_comp_io is None and d.r_comp_comm is None
    json.dumps(d.to_dict())   # no Infinity/NaN surprises


def test_to_dict_is_strict_json():
    d = diagnose(make_report([{"t_comm": 0.0}] * 3))
    text = json.dumps(d.to_dict(), allow_nan=False)
    assert json.loads(text)["r_comp_comm"] == "inf"


def test_imbalance_is_max_over_median():
    # worker totals 2.2, 2.2, 2.2, 6.2 (extra 4 s of compute on the last one)
    r = make_report([{}, {}, {}, {"t_compute": 5.0}])
    assert diagnose(r).imbalance == pytest.approx(6.2 / 2.2)


def test_baseline_speedup_and_efficiency():
    base = make_report(n_workers=1, t_total=8.0, executor="serial")
    run4 = make_report(n_workers=4, t_total=2.5)
    d = diagnose(run4, baseline=base)
    assert d.speedup == pytest.approx(3.2)
    assert d.efficiency == pytest.approx(0.8)


def test_scaling_relative_to_smallest_n():
    reps = [make_report(n_workers=n, t_total=t) for n, t in ((4, 3.0), (2, 5.0), (8, 2.0))]
    pts = scaling(reps)
    assert [p.n_workers for p in pts] == [2, 4, 8]
    assert [p.speedup for p in pts] == pytest.approx([1.0, 5 / 3, 2.5])
    assert [p.efficiency for p in pts] == pytest.approx([1.0, 5 / 3 * 2 / 4, 2.5 * 2 / 8])
    base = make_report(n_workers=1, t_total=10.0)
    pts = scaling(reps, reference=base)
    assert [p.n_workers for p in pts] == [1, 2, 4, 8]
    assert pts[-1].speedup == pytest.approx(5.0) and pts[-1].efficiency == pytest.approx(5 / 8)


# ---------------------------------------------------------------- stragglers


def test_planted_slow_rank_is_found_with_its_component():
    workers = [{} for _ in range(8)]
    workers[5] = {"t_comm": 4.0}                 # rank 5 waits 4 s in the gather
    d = diagnose(make_report(workers))
    assert [s.name for s in d.stragglers] == ["rank 5"]
    s = d.stragglers[0]
    assert s.kind == "worker" and s.component == "t_comm"
    assert s.excess == pytest.approx(3.9)
    assert s.ratio == pytest.approx(s.t_total / 2.2)


@pytest.mark.parametrize("phase", ["t_start", "t_init_top", "t_init_traj", "t_io", "t_compute"])
def test_straggler_component_is_the_phase_with_largest_excess(phase):
    # every worker loads the topology (a topology loaded once is preparation: see below)
    workers = [{"t_init_top": 0.01} for _ in range(6)]
    workers[2] = {phase: 6.0, "t_io": 1.5} if phase != "t_io" else {"t_io": 6.0, "t_compute": 1.5}
    d = diagnose(make_report(workers))
    assert len(d.stragglers) == 1
    assert d.stragglers[0].name == "rank 2" and d.stragglers[0].component == phase


def test_waiting_for_others_makes_no_straggler_the_slow_starter_is_one():
    # issue 23: rank 3 starts 6 s late; the others wait for it at the barrier. With waits counted,
    # every rank's time came out equal and nobody was named; the waiting ranks are its victims.
    workers = [{"t_wait": 6.0} for _ in range(4)]
    workers[3] = {"t_start": 6.0}
    d = diagnose(make_report(workers))
    assert [(s.name, s.component, s.cause) for s in d.stragglers] == [("rank 3", "t_start", "start-up")]
    assert "rank 3 was slow to start" in d.advice[0].message
    text = format_table(make_report(workers), d)
    assert "slow in t_start (start-up" in text


def test_one_topology_load_on_rank_0_makes_no_straggler():
    # issue 17: under MPI rank 0 alone reads the topology (the job's preparation) and was always
    # flagged; the table's "busiest worker" must add up to the row the table shows for it.
    workers = [{} for _ in range(4)]
    workers[0] = {"t_init_top": 3.0, "t_compute": 1.2}    # rank 0 also the busiest in its tasks
    r = make_report(workers)
    d = diagnose(r)
    assert d.stragglers == []
    row0 = next(w for w in r.workers if w.worker == "rank 0")
    text = format_table(r, d)
    assert f"= {row0.t_total:.3f} s" in text and "topology load" in text
    assert "*" not in next(ln for ln in text.splitlines() if ln.startswith("rank 0"))
    # a real straggler beside it is still found
    workers[3] = {"t_io": 8.0}
    assert [s.name for s in diagnose(make_report(workers)).stragglers] == ["rank 3"]


def test_task_stragglers():
    workers = [{} for _ in range(4)]
    workers[1] = {"t_init_traj": 3.0}             # both of rank 1's tasks open slowly
    d = diagnose(make_report(workers))
    assert {s.name for s in d.task_stragglers} == {"2 (rank 1)", "3 (rank 1)"}
    assert all(s.kind == "task" and s.component == "t_init_traj" for s in d.task_stragglers)


def test_no_stragglers_below_threshold_or_single_worker():
    assert diagnose(make_report([{}, {}, {"t_compute": 1.5}])).stragglers == []   # 2.7 < 1.5 x 2.2
    assert diagnose(make_report(n_workers=1)).stragglers == []
    assert find_stragglers([], [], "worker") == []


def test_workers_summed_from_tasks_when_missing():
    r = make_report([{}, {}, {"t_io": 9.0}])
    r2 = RunReport.from_dict({**r.to_dict(), "workers": []})
    d = diagnose(r2)
    assert [s.name for s in d.stragglers] == ["rank 2"] and d.stragglers[0].component == "t_io"


# ---------------------------------------------------------------- advice rules

AMP_BAD = {"one frame": 1.0, "block of 100 frames": 3.5, "150-atom subset, 100 frames": 21.0}
AMP_SUBSET_ONLY = {"one frame": 8.0, "block of 100 frames": 1.28, "150-atom subset, 100 frames": 21.0}
TINY = {"t_init_traj": 0.0, "t_io": 0.01, "t_compute": 0.01, "t_comm": 0.0}
H5 = {"format": "h5md", "path": "slow.h5md", "chunks": [32, 1000, 3], "n_atoms": 3341}


def _slow(i: int, **phases) -> list[dict]:
    ws = [{} for _ in range(6)]
    ws[i] = phases
    return ws


#: A DCD file's facts as its Source (MDAnalysis's reader) sets them: whole frames decoded.
DCD = {"format": "DCD", "path": "adk.dcd", "decoding": "whole:MDAnalysis"}
#: A chain of XTC parts' facts (trajscale's decoder reads each frame up to the last selected atom).
XTC_CHAIN = {"format": "segments", "segment_formats": "XTC", "n_segments": 2,
             "decoding": "prefix:trajscale's XTC decoder"}

#: rule -> (report that must trigger it, reports that must not).
CASES = {
    "io-bound-format": (
        lambda: make_report([{"t_io": 3.0}] * 4, source=DCD),
        [lambda: make_report([{"t_io": 3.0}] * 4, source={"format": "h5md", "path": "adk.h5md"}),
         lambda: make_report([{"t_io": 3.0}] * 4, source={"format": "segments", "segment_formats": "H5MD",
                                                          "n_segments": 2}),
         lambda: make_report([{"t_io": 3.0}] * 4, source={"format": "NPY", "path": "adk.npy"}),   # read in place
         lambda: make_report([{"t_compute": 3.0}] * 4, source=DCD)],
    ),
    "chunk-amplification": (
        lambda: make_report(n_workers=2, source={**H5, "read_amplification": AMP_SUBSET_ONLY},
                            n_atoms=214),                         # a 214-atom selection
        [lambda: make_report(n_workers=2, source={**H5, "read_amplification": AMP_SUBSET_ONLY},
                             n_atoms=214, bytes_per_frame=3341 * 12),   # the source reads whole frames
         lambda: make_report(n_workers=2, source=dict(H5))],      # no layout facts
    ),
    "comm-stragglers": (
        lambda: make_report(_slow(3, t_comm=5.0)),
        [lambda: make_report(_slow(3, t_init_traj=5.0)), lambda: make_report(n_workers=6)],
    ),
    "init-stragglers": (
        lambda: make_report(_slow(0, t_init_traj=5.0)),
        [lambda: make_report(_slow(0, t_comm=5.0)), lambda: make_report(n_workers=6),
         lambda: make_report(_slow(0, t_init_top=5.0))],         # topology loaded once, on one worker
    ),
    "imbalance": (
        lambda: make_report([{}, {}, {}, {"t_compute": 2.6}]),    # 3.8 s vs median 2.2 s
        [lambda: make_report(n_workers=4, tasks_per_worker=4),
         lambda: make_report(n_workers=4, tasks_per_worker=2)],   # 8 even tasks for 4 workers
    ),
    "fixed-costs": (
        lambda: make_report(n_workers=2, t_total=10.0),               # workers busy 2.2 s of 10 s
        [lambda: make_report(n_workers=2),                              # all wall time in tasks
         lambda: make_report([TINY] * 2, t_total=0.3),                  # too short to matter
         lambda: replace(make_report(n_workers=2, t_total=4.0), t_prepare=1.0)],   # 45 % fixed
    ),
    "oversubscribed": (
        lambda: on_cores(make_report([{"t_compute": 4.0}] * 4), "3"),      # two workers on each host's one core
        [lambda: on_cores(make_report([{"t_compute": 4.0}] * 4), "0-1"),   # two on two
         lambda: make_report([{"t_compute": 4.0}] * 4)],                   # cores not recorded (older reports)
    ),
    "compute-bound": (
        lambda: make_report([{"t_compute": 4.0}] * 4),
        [lambda: make_report([{"t_compute": 4.0}] * 5 + [{"t_compute": 12.0}]),   # a straggler
         lambda: make_report([{"t_compute": 4.0, "t_comm": 5.0}] * 4),            # comm-bound
         lambda: make_report(n_workers=4),                                         # R_comp/IO = 1
         lambda: make_report([{"t_compute": 4.0}] * 4, t_total=20.0)],             # fixed costs dominate
    ),
    "union-selection": (
        lambda: _in_one_pass(900, [("rmsd", 50), ("rdf", 900)]),
        [lambda: _in_one_pass(100, [("rmsd", 5), ("rdf", 100)]),   # the union is a tenth of the file
         lambda: _in_one_pass(900, [("rmsf", 500), ("rdf", 900)]),   # no analysis of few atoms
         lambda: make_report(n_atoms=900, source={"format": "h5md", "n_atoms": 1000})],   # one analysis
    ),
    "remote-requests": (
        lambda: _fetched(make_report(n_workers=2, source=REMOTE), per_frame=1.0),   # a request per frame
        [lambda: _fetched(make_report(n_workers=2, source=REMOTE), per_frame=0.05),   # spans merged
         lambda: _fetched(make_report(n_workers=2, source={**REMOTE, "compression": "none"}), per_frame=1.0),
         lambda: _fetched(make_report(n_workers=2, source={**REMOTE, "chunks": [32, 3341, 3]}), per_frame=1.0),
         lambda: make_report(n_workers=2, source=REMOTE)],   # a local file: no requests
    ),
}

#: A compressed store with one-frame chunks behind a URL.
REMOTE = {"format": "h5md", "path": "s3://bucket/traj.h5md", "chunks": [1, 3341, 3], "n_atoms": 3341,
          "compression": "gzip:4"}


def _fetched(report: RunReport, per_frame: float) -> RunReport:
    """``report`` with its tasks' remote requests at ``per_frame`` requests per frame."""
    report.tasks = [replace(t, requests=max(1, round(per_frame * t.frames)), bytes_fetched=t.frames * 40_000,
                            t_network=0.01 * t.frames) for t in report.tasks]
    return report


def _in_one_pass(n_union: int, analyses: list[tuple[str, int]]) -> RunReport:
    """A report of analyses (name, atoms) run in one pass over ``n_union`` of a file's 1000 atoms."""
    from trajscale.report.runfacts import AnalysisShare

    report = make_report(n_atoms=n_union, source={"format": "h5md", "n_atoms": 1000})
    report.meta = replace(report.meta, analyses=tuple(AnalysisShare(n, 0.5, a) for n, a in analyses))
    return report


def test_every_rule_has_cases():
    assert set(CASES) == set(RULES)


@pytest.mark.parametrize("name", list(RULES))
def test_rule_triggers(name):
    report = CASES[name][0]()
    d = diagnose(report)
    advice = RULES[name](report, d)
    assert isinstance(advice, Advice) and advice.rule == name
    assert advice.message and advice.reason
    assert any(char.isdigit() for char in advice.reason)        # the measured reason, with numbers
    assert name in [a.rule for a in d.advice]


@pytest.mark.parametrize("name", list(RULES))
def test_rule_does_not_trigger(name):
    for make in CASES[name][1]:
        report = make()
        assert RULES[name](report, diagnose(report)) is None, name


@pytest.mark.cli
def test_chain_advice_names_200_parts_as_one_glob_the_shell_expands_to_them(tmp_path):
    """The suggested convert command over a 200-part chain is short and runnable: ``sh`` expands its glob
    to exactly the parts, in the run's order, and the output is named after the chain, not part 0."""
    import shlex
    import subprocess

    folder = tmp_path / "my runs"   # a space: the folder must be quoted, the star must not
    folder.mkdir()
    parts = [str(folder / f"md.part{i:04d}.xtc") for i in range(1, 201)]
    for p in parts:
        open(p, "w").close()
    (folder / "md.part0001.xtc.bak").touch()   # matches no .xtc glob
    chain = make_report([{"t_io": 3.0}] * 4, source={**XTC_CHAIN, "path": parts[0]})
    chain.meta = RunFacts(topology="top.gro", trajectories=tuple(parts))
    a = RULES["io-bound-format"](chain, diagnose(chain))
    cmd = a.message.split("`")[1]
    assert len(cmd) < 200 and cmd.endswith("-o md.part.h5md"), cmd
    files = cmd.split("top.gro ", 1)[1].rsplit(" -o ", 1)[0]
    got = subprocess.run(["sh", "-c", f"for f in {files}; do echo \"$f\"; done"], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert got == parts
    odd = parts[:5] + [str(folder / "other.xtc")]   # no glob matches exactly these: every name, quoted
    open(odd[-1], "w").close()
    chain.meta = replace(chain.meta, trajectories=tuple(odd))
    a = RULES["io-bound-format"](chain, diagnose(chain))
    assert " ".join(shlex.quote(p) for p in odd) in a.message


def test_rule_details():
    d = diagnose(CASES["io-bound-format"][0]())
    a = next(a for a in d.advice if a.rule == "io-bound-format")
    assert "trajscale convert" in a.message and "adk.dcd" in a.message and "0.33" in a.reason
    chain = make_report([{"t_io": 3.0}] * 4, source={**XTC_CHAIN, "path": "run.part0001.xtc"})
    a = RULES["io-bound-format"](chain, diagnose(chain))   # parts: convert them; they are segments already
    assert "convert TOPOLOGY PART..." in a.message and "split" not in a.message and "XTC source" in a.reason
    d = diagnose(CASES["chunk-amplification"][0]())
    a = next(a for a in d.advice if a.rule == "chunk-amplification")
    assert "--chunks auto" in a.message and "21.0x" in a.reason and "150-atom subset" in a.reason
    assert "slow.h5md" in a.message and "(32, 1000, 3)" in a.reason
    whole = make_report(n_workers=2, source={**H5, "read_amplification": AMP_BAD}, n_atoms=3341,
                        bytes_per_frame=3341 * 12)
    a = RULES["chunk-amplification"](whole, diagnose(whole))
    # a test pattern's cost, not the run's own selection
    assert a is not None and '"block of 100 frames" (trajscale inspect) costs 3.5x' in a.reason
    assert "--chunks auto" in a.message
    tiny = make_report(n_workers=2, tasks_per_worker=20, frames_per_task=2, bytes_per_frame=3341 * 12,
                       source={**H5, "chunks": [52, 3341, 3], "read_amplification": AMP_SUBSET_ONLY})
    a = RULES["chunk-amplification"](tiny, diagnose(tiny))
    assert a is not None and '"one frame" (trajscale inspect) costs 8.0x' in a.reason and "--chunks frame" in a.message
    # A file that already has the planned chunks is not told to rechunk into them (the demo's file was)
    planned = make_report(n_workers=2, n_atoms=214, source={**H5, "read_amplification": AMP_SUBSET_ONLY,
                                                           "planned_chunks": list(H5["chunks"])})
    a = RULES["chunk-amplification"](planned, diagnose(planned))
    assert a is not None and "--chunks" not in a.message and "--pattern atoms:" in a.message
    top = diagnose(make_report([{"t_init_top": 5.0}] + [{"t_init_top": 0.2}] * 5))
    a = next(a for a in top.advice if a.rule == "init-stragglers")
    assert "broadcast" in a.message and "rank 0" in a.reason
    traj = diagnose(CASES["init-stragglers"][0]())
    assert "segments" in next(a for a in traj.advice if a.rule == "init-stragglers").message
    few = make_report(n_workers=4, tasks_per_worker=[1, 1, 1, 2])    # 5 tasks, balanced times
    a = RULES["imbalance"](few, diagnose(few))
    assert a is not None and "--tasks 16" in a.message and "5 uneven" in a.reason


def test_fixed_costs_name_their_cause():
    r = make_report(n_workers=2, t_total=10.0)
    d = diagnose(r)
    assert d.t_busy == pytest.approx(2.2) and d.t_outside == pytest.approx(7.8)
    a = RULES["fixed-costs"](r, d)
    assert "reuse" in a.message and "7.8 s of the 10 s" in a.reason and "workers 7.8 s" in a.reason
    r = replace(make_report(n_workers=2, t_total=10.0), t_prepare=7.0)
    d = diagnose(r)
    assert d.t_outside == pytest.approx(0.8)
    a = RULES["fixed-costs"](r, d)
    assert "Universe once" in a.message and "preparation 7 s" in a.reason


def test_one_off_topology_load_is_not_imbalance():
    # the root's single topology load (serial preparation) lands on one worker
    r = make_report([{"t_init_top": 3.0, "t_compute": 4.0}] + [{"t_compute": 4.0}] * 3)
    d = diagnose(r)
    assert d.imbalance > 1.5 and d.stragglers == []      # issue 17: not a straggler either
    assert [a.rule for a in d.advice] == ["compute-bound"]


def test_a_failing_rule_is_skipped():
    def broken(report, d):
        raise KeyError("no such field")

    r = make_report([{"t_compute": 4.0}] * 2)
    out = advise(r, diagnose(r), {"broken": broken, **RULES})
    assert [a.rule for a in out] == ["compute-bound"]


def test_no_communication_is_n_a_not_inf():
    # issue 17: "R_comp/comm inf" on runs without communication
    r = make_report([{"t_comm": 0.0}] * 2, executor="processes")
    d = diagnose(r)
    assert "R_comp/comm n/a" in short_report(r, d)
    assert re.search(r"R_comp/comm +n/a", format_table(r, d))
    assert "inf" not in short_report(r, d)


def test_report_prints_as_its_summary():
    # issue 17: print(r.report) dumped the whole dataclass, every task record included
    r = make_report(n_workers=3, executor="processes")
    text = str(r)
    assert text.splitlines()[0].startswith("rmsd on processes x3: 300 frames")
    assert "TaskTiming" not in text and "TaskTiming" not in repr(r) and len(repr(r)) < 200
    assert len(r.to_dict()["tasks"]) == 6          # the full data stays in to_dict / JSON


def test_short_report():
    r = make_report(_slow(3, t_comm=5.0), source={"format": "DCD", "path": "x.dcd"}, t_total=10.0)
    text = short_report(r)
    lines = text.splitlines()
    assert 2 <= len(lines) <= 4
    assert "R_comp/IO" in lines[0] and "R_comp/comm" in lines[0]
    assert "frames/s" not in text   # throughput is on the summary line, once
    assert "stragglers: 1 of 6 workers" in text
    assert "advice:" in lines[-1]
