"""What an ensemble run says, said once and right: a glob of XTC files without a topology refused in one line
before any file is read; two glob runs in one folder keep their results apart, each named after its output."""

from __future__ import annotations

import shutil

import pytest

import trajscale as ts
from tests.conftest import run_cli_here

pytestmark = pytest.mark.cli


def test_an_xtc_glob_without_a_topology_is_refused_once(replicas, tmp_path):
    for name in ("adk-0", "adk-1"):
        shutil.copy(replicas["members"][name][1], tmp_path / f"{name}.xtc")
    got = run_cli_here("run", "rmsd", "--ensemble", str(tmp_path / "*.xtc"), "--select", "name CA",
                       "--executor", "serial", cwd=tmp_path)
    assert got.returncode == 2 and got.stdout == "", got.stdout
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and "its 2 trajectories are XTC files" in lines[0], got.stderr
    assert "--topology FILE" in lines[0] and "select_atoms" not in lines[0]
    assert not list(tmp_path.glob("*-results")), "refused before a results folder was made"
    with pytest.raises(ts.TrajscaleError, match="give their topology"):
        ts.run(ts.RMSD(select="name CA"), str(tmp_path / "*.xtc"))


def test_two_glob_runs_in_one_folder_keep_their_results_apart(replicas, tmp_path):
    from MDAnalysisTests.datafiles import PSF

    for name in ("adk-0", "adk-1"):
        shutil.copy(replicas["members"][name][1], tmp_path / f"{name}.xtc")
    for analysis, out in (("rmsd", "rmsd.csv"), ("rgyr", "rgyr.csv")):
        got = run_cli_here("run", analysis, "--ensemble", str(tmp_path / "*.xtc"), "--topology", PSF, "--select",
                           "name CA", "--executor", "serial", "--out", out, cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        assert f"results of each trajectory: {out[:-4]}-results" in got.stdout
    assert sorted(p.name for p in tmp_path.glob("*-results")) == ["rgyr-results", "rmsd-results"]
