"""The storage a prediction meets, cold or cached, chosen from evidence (``report --predict --storage``).

Hand-made reports with known read costs and page-cache records; every read term is compared with the
equations of docs/scaling.md ("The storage a run meets") evaluated here in float64.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.report.test_predict import MB, _serial
from trajscale.report.conditions import Load, PageCache, RunConditions
from trajscale.report.machine import Machine
from trajscale.report.predict import fit, format_predictions, predict_model, storage_wait, terms_at
from trajscale.report.storage import choose, for_case, predict_storage

COLD, WARM = 1e9, 5e9   # the probe's one-reader rates, bytes/s
PROFILE = Machine(name="node", nodes=1, cores_per_node=1024, memory_bytes=64 * 2**30,
                  read_curve=((1, COLD), (2, 1.5e9), (4, 2e9)), cached_read_bps=WARM)


def _report(resident: float | None, host: str = "node", file_bytes: int = 1000 * MB, t_io: float = 4.0):
    """A serial report that read 1000 MB in ``t_io`` s, with ``resident`` of its file cached at its start."""
    r = _serial(t_io=t_io, t_compute=2.0, frames=1000, bytes_per_frame=MB)
    r.process = dict(r.process, host=host)
    if resident is not None:
        r.conditions = RunConditions(page_cache=PageCache(1, file_bytes, 1000, resident, False)).to_dict()
    return r


def test_a_warm_report_predicts_its_own_rate_cached_and_adds_the_storage_cold():
    model = fit(_report(1.0), "processes", ran_on=PROFILE)
    got = predict_storage(model, [1, 4], PROFILE)
    assert (got.storage.case, got.storage.chosen) == ("cached", "auto")
    s = np.float64(4.0) / (1000 * MB)          # the report's seconds per byte
    own = s - 1 / np.float64(WARM)             # less the page cache's own time
    B = np.float64(1000 * MB)
    assert terms_at(got.model, 1, PROFILE).read == pytest.approx(float(B * s), rel=1e-12)
    cold = for_case(model, PROFILE, "cold")
    assert terms_at(cold, 1, PROFILE).read == pytest.approx(float(B * (own + 1 / np.float64(COLD))), rel=1e-12)
    # N = 4: 16 tasks, 4 a rank: a quarter of the bytes each.  A rank's reads wait for its bytes at one
    # reader's rate (0.25 s), while the others compute (0.5 s each): the storage delivers all four ranks'
    # bytes at its 2 GB/s for 4 readers in 0.5 s, sooner than one rank's CPU and reads take
    t = terms_at(cold, 4, PROFILE)
    assert t.compute == pytest.approx(0.5, rel=1e-12)
    assert t.read == pytest.approx(float(B / 4 * own + B / 4 / np.float64(COLD)), rel=1e-12)
    assert terms_at(got.model, 4, PROFILE).read == pytest.approx(float(B / 4 * s), rel=1e-12)
    assert got.other[1].t_wall > got.preds[1].t_wall


def _schweitzer_wait(n: int, d: float, z: float) -> float:
    """The mean wait at one FCFS queue of demand ``d`` with ``n`` customers and a delay of ``z``, by
    iterating Schweitzer's approximation to its fixed point (not the closed form the model uses)."""
    r = d
    for _ in range(10_000):
        q = n * r / (z + r)
        r = d * (1 + (n - 1) / n * q)
    return r


def test_cold_ranks_overlap_their_reads_with_each_others_compute_queueing_at_the_storage():
    """A cold report (1000 MB read in 1.2 s, 1 GB/s of it the storage's), predicted at N = 4 on a storage
    that gives 1 GB/s however many read.  Each rank's CPU is 0.05 s of own read cost and 0.5 s of
    compute; its 250 MB take the storage 0.25 s.  One rank's reads overlap the others' compute and
    reads that come together queue: the wait is the mean-value answer for 4 customers of a queue with
    0.25 s of demand and 0.55 s of delay, about 0.66 s; the work about 1.21 s.  Charging each rank its
    reads at a quarter of the storage and then its compute would give 0.05 + 1.0 + 0.5 = 1.55 s; the
    storage alone needs 1.0 s."""
    flat = dataclasses.replace(PROFILE, read_curve=((1, COLD), (4, COLD)))
    cold = for_case(fit(_report(0.0, t_io=1.2), "processes", ran_on=flat), flat, "cold")
    t = terms_at(cold, 4, flat)
    own = np.float64(250 * MB) * (np.float64(1.2) / (1000 * MB) - 1 / np.float64(COLD))
    assert t.compute == pytest.approx(0.5, rel=1e-12)
    wait = _schweitzer_wait(4, float(np.float64(250 * MB) / np.float64(COLD)), float(own) + 0.5)
    assert t.read == pytest.approx(float(own) + wait, rel=1e-9)
    assert 1.0 < t.read + t.compute < 1.55
    # one rank alone pays its CPU and its reads one after the other, as its serial report did
    one = terms_at(cold, 1, flat)
    assert one.read == pytest.approx(1.2, rel=1e-12)


def test_the_storage_wait_tends_to_its_bounds():
    """Reads that dominate keep the storage busy (the wait tends to N D - Z); compute that dominates
    leaves each read alone on the storage (the wait tends to D); a rank never reads faster than alone."""
    assert storage_wait(1, 0.3, 0.3, 5.0) == pytest.approx(0.3, rel=1e-12)
    assert storage_wait(64, 1.0, 1.0, 1.0) == pytest.approx(63.0, rel=1e-3)
    assert storage_wait(4, 1.0, 1.0, 1e4) == pytest.approx(1.0, rel=1e-3)
    assert storage_wait(4, 0.5, 0.1, 10.0) == 0.5   # a parallel file system: 4 readers share more than 1 gets


def test_a_warm_run_is_not_capped_at_the_storages_cold_rate():
    """A report that read 1000 MB at 2 GB/s from the page cache, predicted at N = 2 with a profile whose
    storage gives 2 readers 1.5 GB/s cold: each rank reads its 500 MB at its own 2 GB/s (0.25 s), not at
    its 0.75 GB/s share of the cold storage (0.667 s), which is what the model without a case gives."""
    model = fit(_report(1.0, t_io=0.5), "processes", ran_on=PROFILE)
    got = predict_storage(model, [2], PROFILE)
    half = np.float64(500 * MB)
    assert got.preds[0].terms.read == pytest.approx(float(half * np.float64(0.5) / (1000 * MB)), rel=1e-12)
    capped = predict_model(model, [2], PROFILE)[0]
    assert capped.terms.read == pytest.approx(float(half / np.float64(0.75e9)), rel=1e-12)


def test_a_cold_report_predicts_the_cached_run_from_the_probes_rates():
    model = fit(_report(0.0, t_io=1.5), "processes", ran_on=PROFILE)
    got = predict_storage(model, [2], PROFILE)
    assert got.storage.case == "cold"
    B, s = np.float64(1000 * MB), np.float64(1.5) / (1000 * MB)
    own = s - 1 / np.float64(COLD)
    cached = for_case(model, PROFILE, "cached")
    assert terms_at(cached, 1, PROFILE).read == pytest.approx(float(B * (own + 1 / np.float64(WARM))), rel=1e-12)
    assert terms_at(got.model, 1, PROFILE).read == pytest.approx(float(B * s), rel=1e-12)


def test_auto_is_cold_for_a_file_larger_than_a_nodes_memory_or_for_another_machine():
    big = fit(_report(1.0, file_bytes=100 * 2**30), "processes", ran_on=PROFILE)
    case = choose(big, PROFILE)
    assert case.case == "cold" and "larger than a node's memory" in case.evidence
    elsewhere = fit(_report(1.0, host="laptop"), "mpi", ran_on=PROFILE)
    case = choose(elsewhere, PROFILE)
    assert case.case == "cold" and "not the machine the report ran on (laptop)" in case.evidence
    # a cluster of this machine's nodes is another machine too: its first read is cold
    assert choose(fit(_report(1.0), "mpi", ran_on=PROFILE), dataclasses.replace(PROFILE, nodes=8)).case == "cold"


def test_without_a_record_the_reports_rate_against_the_storages_cold_rate_tells():
    """1000 MB in 0.5 s is 2 GB/s, faster than the storage's cold 1 GB/s: those reads came from memory."""
    fast = fit(_report(None, t_io=0.5), "processes", ran_on=PROFILE)
    assert choose(fast, PROFILE).case == "cached"
    slow = fit(_report(None, t_io=4.0), "processes", ran_on=PROFILE)
    assert choose(slow, PROFILE).case == "cold"
    # no probe rates and no record: cold, and without the probe's two rates the report's rate stands for both
    bare = Machine(name="node", nodes=1, cores_per_node=8)
    assert choose(slow, bare).case == "cold"
    assert terms_at(for_case(slow, bare, "cold"), 1, bare).read == terms_at(slow, 1, bare).read


def test_a_given_case_is_predicted_and_named_given():
    model = fit(_report(1.0), "processes", ran_on=PROFILE)
    got = predict_storage(model, [2], PROFILE, "cold")
    assert (got.storage.case, got.storage.chosen) == ("cold", "given")
    assert got.storage.row()[2] == "given"
    # each rank's 500 MB comes at one reader's cold rate instead of the page cache's (the ranks' 1 s of
    # compute hides the other's reads: the storage's 1.5 GB/s for 2 readers is not what binds)
    assert got.preds[0].t_wall == pytest.approx(got.other[0].t_wall + float(
        np.float64(500 * MB) * (1 / np.float64(COLD) - 1 / np.float64(WARM))), rel=1e-9)


def test_the_other_case_is_printed_beside_the_wall_when_it_falls_outside_the_range():
    model = fit(_report(1.0), "processes", ran_on=PROFILE)
    got = predict_storage(model, [1, 2], PROFILE)
    notes = got.other_column()
    # N = 1 is a point (8.3 s cold against 7.5 s): printed; at N = 2 the cold 5.92 s lies inside the range
    # that the unmeasured start-up (x0.5 .. x2) gives, 5.02-6.52 s: not printed
    assert notes[0] == f"cold {got.other[0].t_wall:.4g}" and got.other[0].t_wall == pytest.approx(8.3)
    assert notes[1] == "" and got.preds[1].t_low <= got.other[1].t_wall <= got.preds[1].t_high
    text = format_predictions(got.model, got.preds, PROFILE, (got.storage.row(),), notes)
    assert "storage case" in text and "cached (page cache" in text and "(cold " in text
    same = dataclasses.replace(PROFILE, read_curve=(), cached_read_bps=None, name="node")
    plain = predict_storage(model, [2], same)
    assert plain.other_column() == [""]   # without the storage's rates the cases do not differ


def test_a_report_measured_on_a_busy_machine_says_so_in_the_prediction():
    r = _report(1.0)
    load = Load("run", 2.0, 2, 4.0, 3.8, 1.9, 0.0, 5.0, 5.5)   # 1.9 s of 3.8 busy were others': ~1 core
    r.conditions = dict(r.conditions, load=load.to_dict())
    model = fit(r, "processes", ran_on=PROFILE)
    assert load.busy and model.busy == load.describe()
    text = format_predictions(model, predict_storage(model, [2], PROFILE).preds, PROFILE)
    assert "machine load while the report ran" in text and "BUSY" in text
    idle = Load("run", 2.0, 2, 4.0, 2.05, 2.0, 0.0, 1.0, 1.0)   # 0.05 s of other work: 0.025 cores
    assert not idle.busy


@pytest.mark.cli
def test_cli_storage_option_and_json(tmp_path):
    path, prof = tmp_path / "r.json", tmp_path / "m.json"
    _report(1.0, host="node").write(path)
    PROFILE.write(prof)
    proc = run_cli("report", str(path), "--predict", "2", "--as", "processes", "--machine", str(prof),
                   "--storage", "cold", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["storage"]["case"], data["storage"]["chosen"]) == ("cold", "given")
    assert data["storage"]["other_case"][0]["case"] == "cached"
    rows = {r["what"]: r for r in data["assumptions"]["rows"]}
    assert rows["storage case"]["origin"] == "given" and rows["storage case"]["value"].startswith("cold")
    assert data["predictions"][0]["t_wall"] > data["storage"]["other_case"][0]["t_wall"]
