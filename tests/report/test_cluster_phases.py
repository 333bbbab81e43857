"""A Dask cluster's start and its workers' wait in a batch queue are phases of their own in the launching
process's record (never "interpreter and imports"), kept out of the prediction's serial phases, and the
prediction says it leaves the queue's wait out."""

from __future__ import annotations

import dataclasses
import time

from MDAnalysisTests.datafiles import DCD, PSF

from trajscale import RMSD, run


def test_noted_cluster_phases_are_their_own_not_imports():
    from trajscale.timeline import PROCESS_PHASE_LABELS, ProcessTimeline, note_phase, runs_start_at_call

    runs_start_at_call()   # this test's timeline starts now, not at the interpreter's start
    line = ProcessTimeline()
    time.sleep(0.3)        # a cluster started in this gap (before the run's first phase ends)
    note_phase("cluster_start", 0.1)
    note_phase("queue_wait", 0.15)
    line.lap("imports")
    rec = line.record()
    got = rec["phases"]
    assert abs(got["cluster_start"] - 0.1) < 1e-9 and abs(got["queue_wait"] - 0.15) < 1e-9
    # imports hold what was left of the gap, not the cluster's: the phases add up to the wall time
    assert abs(got["imports"] + 0.25 - rec["t_wall"]) < 1e-6 and got["imports"] < rec["t_wall"] - 0.25 + 1e-6
    assert PROCESS_PHASE_LABELS["cluster_start"] == "cluster start"
    assert PROCESS_PHASE_LABELS["queue_wait"] == "queue wait"


def test_the_prediction_leaves_the_queue_out_and_says_so():
    from trajscale.report.fit import fit
    from trajscale.report.machine import Machine
    from trajscale.report.predict import model_assumptions

    report = run(RMSD(select="name CA"), PSF, DCD, executor="serial").report
    phases = dict(report.process["phases"])
    base = fit(report, "dask")
    phases.update(cluster_start=5.0, queue_wait=60.0)
    waited = fit(dataclasses.replace(report, process={**report.process, "phases": phases}), "dask")
    assert waited.fixed_s == base.fixed_s and waited.imports_s == base.imports_s
    rows = {w: (v, o) for w, v, o in model_assumptions(waited, Machine(name="two", nodes=1, cores_per_node=2))}
    value, origin = rows["batch queue wait"]
    assert value.startswith("none:") and "left out" in value and origin == "defaulted"
