"""What an ensemble run says, said once and right: a glob of XTC files without a topology refused in one line
before any file is read; two glob runs in one folder keep their results apart, each named after its output; an
empty selection refused in one line, MDAnalysis's warnings on a selection folded into its refusal."""

from __future__ import annotations

import os
import shutil
import warnings

import pytest

import trajscale as ts
from tests.conftest import run_cli, run_cli_here

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


def test_an_mdcath_file_is_told_by_its_layout_whatever_its_name(tmp_path):
    """The same mdCATH-shaped file named ``mdcath_dataset_*.h5`` and named otherwise gives the same members, as
    one file and in a glob (beside an H5MD file, which stays one member), on a run and on the dataset."""
    import MDAnalysis as mda
    import numpy as np
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.convert.convert import convert
    from trajscale.ml.ensemble import EnsembleDataset
    from trajscale.testing.mdcath import from_universe

    named = from_universe(tmp_path / "mdcath_dataset_1aaaA00.h5", mda.Universe(PSF, DCD), domain="1aaaA00",
                          select="resid 1-20", n_frames=5)
    other = tmp_path / "glob" / "protein.h5"
    other.parent.mkdir()
    shutil.copy(named, other)
    convert(PSF, [DCD], str(tmp_path / "glob" / "adk.h5"), stop=4)
    want = [n.split("/", 1)[1] for n in ts.Ensemble.of(named).names]
    assert [n.split("/", 1)[1] for n in ts.Ensemble.of(str(other)).names] == want == ["320/0", "348/0", "348/1"]
    ens = ts.Ensemble.from_glob(str(tmp_path / "glob" / "*.h5"))
    assert ens.names == ("adk", "protein/320/0", "protein/348/0", "protein/348/1")
    r = ts.run(ts.RMSD(select="name CA"), ens)
    mine = ts.run(ts.RMSD(select="name CA"), named)
    assert [x.member.name for x in r.refused] == ["adk"] and not mine.refused   # (the H5MD stores no atom names)
    for key in want:
        np.testing.assert_array_equal(r[f"protein/{key}"].rmsd, mine[f"1aaaA00/{key}"].rmsd)
    assert EnsembleDataset(str(tmp_path / "glob" / "*.h5")).names == ens.names


def test_an_empty_selection_is_refused_in_one_line_and_mdanalysis_words_go_into_a_refusal(tmp_path):
    """``--select ""`` over a glob, with a topology cache of its own (MDAnalysis resolves the selection first):
    one line, at every verbosity no MDAnalysis warning beside it, the same reason for every member; a selection
    that selects nothing and that MDAnalysis warns on is refused with MDAnalysis's words, and none escapes."""
    from MDAnalysisTests.datafiles import GRO, XTC

    from trajscale.errors import SelectionError
    from trajscale.topology import select_atoms

    for name in ("a", "b"):
        shutil.copy(XTC, tmp_path / f"{name}.xtc")
    env = {**os.environ, "TRAJSCALE_CACHE_DIR": str(tmp_path / "cache")}
    for verbose in ([], ["-v"]):
        shutil.rmtree(tmp_path / "out-results", ignore_errors=True)
        got = run_cli(*verbose, "run", "rmsd", "--ensemble", str(tmp_path / "*.xtc"), "--topology", GRO, "--select",
                      "", "--executor", "serial", "--out", "out.csv", cwd=tmp_path, env=env)
        assert got.returncode == 2 and "Warning" not in got.stderr and "warn(" not in got.stderr, got.stderr
        lines = got.stderr.strip().splitlines()
        assert verbose or len(lines) == 1, got.stderr
        assert "(a: rmsd: selection [''] is empty: it selects no atoms)" in lines[-1], got.stderr
        refused = (tmp_path / "out-results" / "refused.csv").read_text()
        assert refused.count("rmsd: selection [''] is empty: it selects no atoms") == 2, refused
    import MDAnalysis as mda

    u = mda.Universe(GRO)
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        with pytest.raises(SelectionError, match=r"selects no atoms \(MDAnalysis: Using float equality"):
            select_atoms(u, "mass 99.5")
    assert escaped == [], [str(w.message) for w in escaped]
