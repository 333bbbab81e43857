"""Smoke runs of the prediction, regression-harness and remote benchmarks (tests/benchmarks/smoke.py),
predict.py --held-out, and regress.py's matrix and sign test."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from .smoke import BENCH, run_script, smoke_test

pytestmark = pytest.mark.tool   # runs the benchmarks at their smallest size

test_smoke = smoke_test(__file__)


@pytest.mark.tool
def test_predict_held_out_runs_each_case_with_the_cache_as_it_says(work):
    """predict.py --held-out at its smallest: one workload, warm and cold; each measured run started with the
    file's pages as the case says (mincore), and ``--storage auto`` chose each case from its own report.
    Its held-out store is a file of its own, built from the run's whole-protein XTC (linked into its folder:
    the protein is not made whole again)."""
    (work / "held" / "held-out").mkdir(parents=True)
    (work / "held" / "held-out" / "adk_whole.xtc").symlink_to(work / "adk_whole.xtc")
    out = run_script(work, "predict.py", ["--held-out", "--quick", "--keep", "{work}/held", "--json",
                                          "{work}/held.json", "--overwrite"])
    assert re.search(r"^cached \(its own report\): median \|error\|", out, re.MULTILINE), out[-3000:]
    rows = json.loads((work / "held.json").read_text())
    assert [(r["workload"], r["case"], r["n"]) for r in rows] == [("rmsf", "cached", 2), ("rmsf", "cold", 2)]
    assert rows[0]["resident"] >= 0.9 and rows[0]["chosen"] == "cached"
    if rows[1]["resident"] <= 0.1:   # POSIX_FADV_DONTNEED took effect on this file system
        assert rows[1]["chosen"] == "cold"
    assert all(r["measured"] > 0 and r["predicted"] > 0 for r in rows)



def _regress():
    """benchmarks/regress.py as a module (its matrix, without running it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("regress", BENCH / "regress.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["regress"] = mod   # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules["regress"]
    return mod


def test_regress_matrix_is_every_analysis_as_the_command_line_takes_it():
    """regress.py's matrix: a row for every analysis ``trajscale run`` offers, on each executor; every row's
    arguments accepted by this tree's command line; every selection in it selects atoms of its system
    (MDAnalysis's own selection on the TPR and on YiiP's GRO)."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import GRO_MEMPROT, TPR

    from trajscale.cli.main import build_parser
    from trajscale.cli.run import command_analyses

    regress = _regress()
    data = regress.Data(TPR, ["a.xtc", "b.xtc"], "adk.h5md", GRO_MEMPROT, "yiip.h5md", "s3://bucket/adk.h5md")
    rows = regress.matrix(data)
    names = [r.name for r in rows]
    assert len(set(names)) == len(names)
    for analysis in command_analyses():
        for executor in ("serial", "processes2"):
            assert f"h5md/{analysis}/default/{executor}" in names, analysis
    parser = build_parser()
    universes = {TPR: mda.Universe(TPR), GRO_MEMPROT: mda.Universe(GRO_MEMPROT)}
    for row in rows:
        argv = row.argv(Path("out"))
        args = parser.parse_args(argv)
        assert args.quiet, row.name
        given = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--select", "--select1", "--select2")]
        plans = [re.findall(r'^select\d? = "(.+)"$', text, re.MULTILINE) for text in row.files.values()]
        for sel in given + [s for found in plans for s in found]:
            assert universes[args.topology].select_atoms(sel).n_atoms > 0, (row.name, sel)


@pytest.mark.parametrize("ratios", [[1.1] * 5, [1.1] * 4 + [0.9], [1.02] * 9 + [0.95, 0.97], [1.5], [0.8] * 6,
                                    [1.0, 1.2, 1.2, 1.2, 1.2, 1.2]])
def test_regress_marks_a_row_by_the_sign_test(ratios):
    """A row is SLOWER (faster) when the pairs where NEW took longer (less long) are too many for chance, by
    SciPy's exact one-sided binomial test at the script's level; ties count for neither side."""
    from scipy.stats import binomtest

    regress = _regress()
    row = regress.Row("h5md/rmsd/default/serial", None, ())
    row.wall = {"OLD": [1.0] * len(ratios), "NEW": list(ratios)}
    slower, faster = sum(r > 1 for r in ratios), sum(r < 1 for r in ratios)
    n = slower + faster
    p_slow = binomtest(slower, n, alternative="greater").pvalue
    p_fast = binomtest(faster, n, alternative="greater").pvalue
    want = "SLOWER" if p_slow <= regress.ALPHA else "faster" if p_fast <= regress.ALPHA else ""
    assert row.mark == want
    assert row.to_dict()["p_slower"] == pytest.approx(p_slow)
