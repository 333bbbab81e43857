"""``trajscale inspect FILE --pattern``: the recommended rechunk command runs, makes the layout it
names (inspect then says the file has it) and keeps the data MDAnalysis reads."""

from __future__ import annotations

import json
import shlex

import MDAnalysis as mda
import numpy as np
import pytest

from tests.conftest import run_cli_here


def rec(*args) -> dict:
    r = run_cli_here("inspect", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["recommendation"]


@pytest.mark.parametrize("pattern, chunks", [("blocks", "auto"), ("frames", "frame")])
def test_recommended_command_makes_the_layout(tmp_path, adk_vacuum, adk_vacuum_h5md, pattern, chunks):
    first = rec(adk_vacuum_h5md, "--pattern", pattern)
    if first["already"]:   # adk_vacuum_h5md has frame chunks: ask for the other pattern's layout first
        other = tmp_path / "other.h5md"
        assert run_cli_here("rechunk", adk_vacuum_h5md, "-o", str(other), "--chunks", "7").returncode == 0
        first = rec(str(other), "--pattern", pattern)
    assert not first["already"]
    cmd = shlex.split(first["command"])
    assert cmd[:2] == ["trajscale", "rechunk"] and cmd[cmd.index("--chunks") + 1] == chunks
    r = run_cli_here(*cmd[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / cmd[cmd.index("-o") + 1]
    assert rec(str(out), "--pattern", pattern)["already"]
    text = run_cli_here("inspect", str(out), "--pattern", pattern).stdout
    assert "already has it" in text and "run: trajscale rechunk" not in text
    ref = mda.Universe(*adk_vacuum).trajectory.timeseries(order="fac")
    np.testing.assert_array_equal(mda.Universe(adk_vacuum[0], str(out)).trajectory.timeseries(order="fac"), ref)


def test_atoms_pattern_counts_the_selection(adk_vacuum, adk_vacuum_h5md):
    n_ca = mda.Universe(adk_vacuum[0]).select_atoms("name CA").n_atoms
    r = rec(adk_vacuum_h5md, "--pattern", "atoms:name CA", "--topology", adk_vacuum[0])
    assert f"{n_ca / 3341:.1%} of each frame" in r["why"] and "--select 'name CA'" in r["why"]
    r = rec(adk_vacuum_h5md, "--pattern", "atoms:0-3000")
    assert f"{3001 / 3341:.1%}" in r["why"] and "--select" not in r["why"]


@pytest.mark.parametrize("args, says", [(["--pattern", "rows"], "--pattern must be frames, blocks or atoms:SEL"),
                                        (["--pattern", "atoms:name CA"], "give --topology"),
                                        (["--pattern", "atoms:0-99999"], "out of range")])
def test_bad_pattern_is_one_clear_error(adk_vacuum_h5md, args, says):
    r = run_cli_here("inspect", adk_vacuum_h5md, *args)
    assert r.returncode != 0 and says in r.stderr and "Traceback" not in r.stderr
