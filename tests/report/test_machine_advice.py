"""Advice that knows the machine: each worker records its host, the host's CPUs and its affinity; more
workers than cores is named as the cause of the waiting, and no advice asks for workers beyond the cores.

The run is real: ``trajscale run --executor processes -n 16`` with the launching process (and so every
worker) allowed two CPUs, as a batch system's cgroup or ``taskset -c 0,1`` allows them, on MDAnalysisTests'
AdK in water."""

from __future__ import annotations

import json
import os
import socket

import pytest
from MDAnalysisTests import datafiles as D

from tests.cli._helpers import convert_with_cli
from tests.conftest import run_cli, run_cli_here
from tests.report._synth import make_report, on_cores
from trajscale.report import diagnose
from trajscale.report.advice import RULES
from trajscale.report.timing import RunReport

TWO = sorted(os.sched_getaffinity(0))[:2]


def _two_cpus() -> None:   # run in the child before exec: its workers inherit the mask
    os.sched_setaffinity(0, TWO)


@pytest.fixture(scope="module")
def water(tmp_path_factory):
    return convert_with_cli(tmp_path_factory.mktemp("machine") / "adk_water.h5md", D.GRO, D.XTC)


@pytest.mark.cli
@pytest.mark.skipif(len(TWO) < 2, reason="needs two CPUs")
def test_sixteen_workers_on_two_cores_are_told_so_and_never_to_add_workers(tmp_path, water):
    rep = tmp_path / "r.json"
    proc = run_cli("run", "rmsd", "--select", "name CA", D.GRO, water, "--executor", "processes", "-n", "16",
                   "--tasks", "16", "--report", str(rep), "--no-progress", timeout=600, preexec_fn=_two_cpus)
    assert proc.returncode == 0, proc.stderr
    shown = run_cli_here("report", str(rep))
    assert shown.returncode == 0, shown.stderr
    data = json.loads(rep.read_text())
    busy = [w for w in data["workers"] if w["n_tasks"]]
    assert len(busy) > 2
    want = f"{TWO[0]}-{TWO[1]}" if TWO[1] == TWO[0] + 1 else f"{TWO[0]},{TWO[1]}"   # as Linux lists CPUs
    for w in data["workers"]:   # every worker's own facts, as the OS gives them
        assert (w["host"], w["cpus"], w["affinity"]) == (socket.gethostname(), os.cpu_count(), want), w
    assert data["process"]["affinity"] == want and data["process"]["cpus"] == os.cpu_count()
    machine = data["diagnosis"]["machine"]
    assert machine == [{"host": socket.gethostname(), "workers": len(busy), "cores": 2, "affinity": want,
                        "cpus": os.cpu_count()}]
    for text in (proc.stdout, shown.stdout):
        assert "add workers" not in text and "convert to H5MD" not in text, text
        assert "use at most 2 workers (`-n 2`)" in text, text
        assert f"{len(busy)} workers ran on {socket.gethostname()}" in text and "2 cores" in text, text
        assert "workers > cores, not from the reads" in text
    assert f"machine           {socket.gethostname()}: {len(busy)} workers on 2 cores" in shown.stdout


def test_old_reports_without_cores_load_and_keep_their_advice():
    r = make_report([{"t_compute": 4.0}] * 4)
    d = r.to_dict(diagnosis=False)
    for rec in d["tasks"] + d["workers"]:   # as written before workers recorded their CPUs
        rec.pop("cpus")
        rec.pop("affinity")
    old = RunReport.from_dict(json.loads(json.dumps(d)))
    assert all(w.cpus == 0 and w.affinity == "" for w in old.workers)
    diag = diagnose(old)
    assert diag.machine == [] and [a.message for a in diag.advice] == ["good scaling expected: add workers"]


def test_new_reports_round_trip_their_cores():
    from trajscale.timeline import cpu_list, parse_cpu_list

    r = on_cores(make_report([{"t_compute": 4.0}] * 4), "0-3,8", cpus=16)
    again = RunReport.from_dict(json.loads(json.dumps(r.to_dict())))
    assert [(w.cpus, w.affinity) for w in again.workers] == [(16, "0-3,8")] * 4
    assert [(t.cpus, t.affinity) for t in again.tasks] == [(t.cpus, t.affinity) for t in r.tasks]
    assert parse_cpu_list("0-3,8") == {0, 1, 2, 3, 8} and cpu_list([8, 0, 1, 2, 3]) == "0-3,8"


@pytest.mark.parametrize("affinity, says", [
    ("0-7", "add workers, up to the 16 cores this run may use (`-n 16`)"),   # 2 workers per 8-core host
    ("0-1", "more speed needs more cores"),                                 # 2 workers per 2-core host
])
def test_compute_bound_advice_never_asks_for_workers_beyond_the_cores(affinity, says):
    r = on_cores(make_report([{"t_compute": 4.0}] * 4), affinity)
    a = RULES["compute-bound"](r, diagnose(r))
    assert says in a.message, a.message
