"""``trajscale inspect`` on an XTC or TRR: frames, atoms, fields, units and times from the frame headers,
against MDAnalysis's own readers; the convert command it prints runs as printed (with the topology
filled in); options that only mean something for H5MD and damaged files get one line."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.coordinates.TRR import TRRReader
from MDAnalysis.coordinates.XTC import XTCReader
from MDAnalysisTests import datafiles as D

from tests.cli._helpers import assert_clean_failure
from tests.conftest import run_cli_here

CASES = {"xtc": (D.GRO, D.XTC, XTCReader), "trr": (D.GRO, D.TRR, TRRReader), "xvf": (D.TPR_xvf, D.TRR_xvf, TRRReader)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_inspect_reports_what_mdanalysis_reads(name, tmp_path):
    top, traj, reader = CASES[name]
    proc = run_cli_here("inspect", traj, "--json")
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(top, traj)
    ts0 = u.trajectory.ts
    fields = ["position"] + ["velocity"] * ts0.has_velocities + ["force"] * ts0.has_forces
    times = np.array([ts.time for ts in u.trajectory])
    steps = [ts.data["step"] for ts in u.trajectory]
    assert facts["n_frames"] == len(u.trajectory) and facts["n_atoms"] == u.atoms.n_atoms
    assert facts["fields"] == fields and facts["units"] == reader.units
    assert facts["file_bytes"] == os.path.getsize(traj)
    t = facts["time"]
    assert t["first"] == times[0] and t["last"] == times[-1] and t["steps"] == [steps[0], steps[-1]]
    assert t["dt"] == pytest.approx(float(np.median(np.diff(times))), rel=1e-12) and t["even"]
    text = run_cli_here("inspect", traj)
    assert text.returncode == 0, text.stderr
    assert f"frames x atoms {len(u.trajectory)} x {u.atoms.n_atoms}" in text.stdout
    assert f"(steps {steps[0]} - {steps[-1]})" in text.stdout


def test_the_printed_convert_command_runs_as_printed(tmp_path):
    """The 'to H5MD' line, with its TOPOLOGY filled in, converts the file: MDAnalysis reads the result
    with the XTC's positions."""
    traj = shutil.copy(D.XTC, tmp_path / "run.xtc")
    facts = json.loads(run_cli_here("inspect", str(traj), "--json").stdout)
    args = shlex.split(facts["convert"].replace("TOPOLOGY", shlex.quote(D.GRO)))
    assert args[:2] == ["trajscale", "convert"]
    proc = run_cli_here(*args[1:], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = mda.Universe(D.GRO, str(tmp_path / "run.h5md")), mda.Universe(D.GRO, D.XTC)
    assert len(a.trajectory) == len(b.trajectory)
    for x, y in zip(a.trajectory, b.trajectory, strict=False):
        assert np.array_equal(x.positions, y.positions)


def test_h5md_only_options_other_formats_and_damage_get_one_line(tmp_path):
    assert_clean_failure(run_cli_here("inspect", D.XTC, "--pattern", "frames"), "--pattern", "for H5MD files", "XTC")
    assert_clean_failure(run_cli_here("inspect", D.DCD, "--group", "protein"), "--group", "for H5MD files", "is DCD")
    cut = tmp_path / "cut.xtc"
    shutil.copyfile(D.XTC, cut)
    with open(cut, "r+b") as fh:
        fh.truncate(os.path.getsize(cut) // 2)
    assert_clean_failure(run_cli_here("inspect", str(cut), "--strict"), "cut.xtc", "cut short")
    assert_clean_failure(run_cli_here("inspect", str(tmp_path / "gone.xtc")), "gone.xtc")
