"""The layout advice of a run with several selections quotes the user's own selection strings and stays
one line; its command runs as printed and writes exactly the atoms the run read (MDAnalysis's selection of
them), on AdK in water (TPR + XTC converted to H5MD)."""

from __future__ import annotations

import json

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.cli._helpers import convert_with_cli
from tests.cli.test_advice_runs import POS, run_printed
from tests.conftest import run_cli_here


@pytest.fixture(scope="module")
def water(tmp_path_factory):
    return convert_with_cli(tmp_path_factory.mktemp("advice_sel") / "adk_water.h5md", D.TPR, D.XTC)


@pytest.mark.parametrize("args, union", [
    (("rdf", "--select1", "name OW", "--select2", "name CA or name OW", "--range", "0", "6"),
     "(name OW) or (name CA or name OW)"),
    (("rmsd", "--select", "name CA", "--groupselection", "name OW"), "(name CA) or (name OW)"),
])
@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_layout_advice_quotes_the_runs_own_selections_on_one_line(tmp_path, water, args, union):
    rep = tmp_path / "r.json"
    proc = run_cli_here("run", *args, D.TPR, water, "--report", str(rep), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    shown = run_cli_here("report", str(rep))
    assert shown.returncode == 0, shown.stderr
    for text in (proc.stdout, shown.stdout):
        advice = [line for line in text.splitlines() if "write a file of only the atoms" in line]
        assert len(advice) == 1, text
        assert f"--select '{union}'" in advice[0] and "index " not in advice[0], advice[0]
        assert len(advice[0]) < 600, len(advice[0])
    (tmp_path / "out").mkdir()
    cmds = run_printed(proc.stdout, tmp_path / "out")
    conv = next(c for c in cmds if c[0] == "convert")
    want = mda.Universe(D.TPR, D.XTC)
    ag = want.select_atoms(union)
    read = json.loads(rep.read_text())["source"]["run_read"]
    assert ag.n_atoms == read["n_atoms"]   # the union is the atoms the run read
    ref = np.array([ag.positions for _ in want.trajectory])
    with h5py.File(tmp_path / "out" / conv[conv.index("-o") + 1]) as f:
        np.testing.assert_allclose(f[POS][()], ref, atol=1e-5)
