"""Stragglers injected on purpose (issue 26): one MPI rank slow in its reads, its compute or its start-up.

The hooks (``TRAJSCALE_TEST_SLOW_READ`` / ``_COMPUTE`` / ``_START``, :mod:`trajscale.timeline`) make
rank 2 of 4 sleep inside that phase.  The report must name rank 2 with that cause, and the prediction for
larger N must carry the straggler: the predicted wall exceeds the same model's without it.
"""

from __future__ import annotations

import dataclasses

import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import run_cli, run_mpi
from trajscale.report import diagnose
from trajscale.report.machine import Machine
from trajscale.report.predict import fit, terms_at, wall_at
from trajscale.report.timing import RunReport

BIG = Machine(name="big", nodes=1, cores_per_node=1024)

pytest.importorskip("mpi4py")
pytestmark = [pytest.mark.slow, pytest.mark.mpi]

SLOW_RANK = 2
#: hook -> (seconds, the cause the report must name, the model's straggler label)
CASES = {
    "read": ("TRAJSCALE_TEST_SLOW_READ", 0.6, "read I/O"),
    "compute": ("TRAJSCALE_TEST_SLOW_COMPUTE", 0.6, "compute"),
    "start-up": ("TRAJSCALE_TEST_SLOW_START", 5.0, "start-up"),
}


@pytest.mark.parametrize("case", CASES)
def test_injected_straggler_is_named_and_carried_into_the_prediction(case, tmp_path, adk_vacuum_h5md):
    var, seconds, cause = CASES[case]
    rep_path = tmp_path / "r.json"
    proc = run_mpi(4, ["-m", "trajscale.cli.main", "run", "rmsd", D.PSF, adk_vacuum_h5md, "--executor", "mpi",
                       "--report", str(rep_path), "--out", str(tmp_path / "rmsd.csv")],
                   env={var: f"{seconds}:{SLOW_RANK}"}, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = RunReport.load(rep_path)
    d = diagnose(report)
    assert d.stragglers, d
    first = d.stragglers[0]
    assert first.name == f"rank {SLOW_RANK}" and first.cause == cause, d.stragglers

    model = fit(report, ran_on=BIG)
    assert f"rank {SLOW_RANK} ({cause}" in model.straggler
    plain = dataclasses.replace(model, slow_read=1.0, slow_compute=1.0, slow_startup_s=0.0, straggler="")
    for n in (16, 128):
        extra = wall_at(model, n, BIG) - wall_at(plain, n, BIG)
        if case == "start-up":   # the slow start is paid once at every N
            assert extra == pytest.approx(model.slow_startup_s)
            assert model.slow_startup_s >= 0.8 * seconds
        else:   # the slow rank's share, at its measured factor over the median rank's rate
            t = terms_at(model, n, BIG)
            share = t.read if case == "read" else t.compute
            factor = model.slow_read if case == "read" else model.slow_compute
            assert factor > 1.5
            assert extra == pytest.approx((factor - 1) * share)
    out = run_cli("report", str(rep_path), "--predict", "16,128")
    assert out.returncode == 0, out.stderr
    assert f"straggler assumed at every N: rank {SLOW_RANK} ({cause}" in out.stdout
