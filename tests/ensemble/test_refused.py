"""A trajectory that cannot be read or computed is refused with its catalog row and the reason; the others
are analysed as MDAnalysis analyses them; ``strict`` refuses the run instead; the command line says so in
its exit status."""

from __future__ import annotations

import csv
import shutil
import warnings

import numpy as np
import pytest

import trajscale as ts
from tests.conftest import run_cli_here
from tests.ensemble.conftest import universe


@pytest.fixture(scope="module")
def troubled(replicas, tmp_path_factory):
    """The replicas' catalog with four more rows: a missing file, a file of noise, one whose frame 3 is NaN
    (found while its frames are mapped), and the ensemble's AdK replicas under a selection they lack."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    folder = tmp_path_factory.mktemp("troubled")
    for name, (_, xtc, _) in replicas["members"].items():
        shutil.copy(xtc, folder / f"{name}.xtc")
    (folder / "noise.xtc").write_bytes(np.random.default_rng(1).bytes(5000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, DCD)
        with mda.Writer(str(folder / "nan.dcd"), u.atoms.n_atoms) as w:
            for ts_ in u.trajectory[:6]:
                if ts_.frame == 3:
                    ts_.positions[:] = np.nan
                w.write(u.atoms)
    rows = list(csv.DictReader(open(replicas["catalog"])))
    rows += [{"name": "missing", "topology": PSF, "trajectory": "gone.xtc", "system": "adk", "replica": "7"},
             {"name": "noise", "topology": PSF, "trajectory": "noise.xtc", "system": "adk", "replica": "8"},
             {"name": "nan", "topology": PSF, "trajectory": "nan.dcd", "system": "adk", "replica": "9"}]
    with open(folder / "troubled.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return folder


def test_the_others_complete_and_each_refusal_says_why(troubled, replicas, tmp_path):
    r = ts.run(ts.RMSD(select="name CA"), str(troubled / "troubled.csv"), executor="processes", n_workers=2,
               results=tmp_path / "out")
    reasons = {x.member.name: x.reason for x in r.refused}
    assert set(reasons) == {"missing", "noise", "nan"}
    assert "gone.xtc: no such file" in reasons["missing"]
    assert "noise.xtc" in reasons["noise"]
    assert "frame 3" in reasons["nan"] and "NaN" in reasons["nan"]
    assert set(r.names) == set(replicas["members"])
    from MDAnalysis.analysis.rms import RMSD

    for name, (top, xtc, _) in replicas["members"].items():
        ref = RMSD(universe(top, xtc), select="name CA").run().results.rmsd[:, 2]
        np.testing.assert_allclose(r[name].rmsd, ref, atol=1e-4)
    table = list(csv.DictReader(open(tmp_path / "out" / "refused.csv")))
    assert [t["name"] for t in table] == ["missing", "noise", "nan"]
    assert table[0]["replica"] == "7" and table[0]["trajectory"].endswith("gone.xtc")
    assert table[2]["reason"] == reasons["nan"]


def test_a_selection_that_picks_nothing_refuses_that_trajectory(replicas):
    r = ts.run(ts.RadiusOfGyration(select="name P"), replicas["catalog"])
    refused = {x.member.name: x.reason for x in r.refused}
    assert set(refused) == {"adk-0", "adk-1", "adk-2"}
    assert all("name P" in why for why in refused.values())
    assert set(r.names) == {"yiip-0", "yiip-1"}
    top, xtc, _ = replicas["members"]["yiip-1"]
    p = universe(top, xtc).select_atoms("name P")
    np.testing.assert_allclose(r["yiip-1"].rgyr, [p.radius_of_gyration() for _ in p.universe.trajectory], rtol=1e-6)


def test_strict_refuses_the_run(troubled):
    with pytest.raises(ts.TrajscaleError, match="missing.*strict"):
        ts.run(ts.RMSD(select="name CA"), str(troubled / "troubled.csv"), strict=True)


def test_every_trajectory_refused_is_an_error(replicas):
    with pytest.raises(ts.TrajscaleError, match="every one of its 5 trajectories was refused"):
        ts.run(ts.RadiusOfGyration(select="resname NONE"), replicas["catalog"])


def test_the_command_exits_8_and_writes_the_refused_table(troubled, tmp_path):
    out = tmp_path / "rmsd.parquet"
    got = run_cli_here("run", "rmsd", "--ensemble", str(troubled / "troubled.csv"), "--select", "name CA",
                       "--results", str(tmp_path / "res"), "--out", str(out), "--executor", "serial", cwd=tmp_path)
    assert got.returncode == 8, got.stderr
    assert "refused: 3 trajectories" in got.stderr and "refused:" not in got.stdout   # (refusals are on stderr)
    assert "frames x 214-564 atoms read" in got.stdout   # (AdK's 214 CA atoms, YiiP's 564)
    assert [t["name"] for t in csv.DictReader(open(tmp_path / "res" / "refused.csv"))] == ["missing", "noise", "nan"]
    import pyarrow.parquet as pq

    assert set(pq.read_table(out)["trajectory"].to_pylist()) == {"adk-0", "adk-1", "adk-2", "yiip-0", "yiip-1"}
    strict = run_cli_here("run", "rmsd", "--ensemble", str(troubled / "troubled.csv"), "--select", "name CA",
                          "--results", str(tmp_path / "res2"), "--strict", cwd=tmp_path)
    assert strict.returncode == 2 and "strict" in strict.stderr and "Traceback" not in strict.stderr


def test_an_analysis_refuses_a_trajectory_for_itself_alone(replicas, tmp_path):
    """AdK's replicas have no box: the RDF of a plan refuses them, and their RMSD and Rg are kept (as
    MDAnalysis computes them); the refused table names the analysis, and a resumed run keeps it so."""
    from MDAnalysis.analysis.rdf import InterRDF
    from MDAnalysis.analysis.rms import RMSD

    adk, yiip = {"adk-0", "adk-1", "adk-2"}, {"yiip-0", "yiip-1"}
    plan = [ts.RMSD(select="name CA"), ts.RadiusOfGyration(select="name CA"),
            ts.RDF(select1="name CA", select2="name CA", nbins=20, range=(2.0, 12.0))]
    rmsd, rg, rdf = ts.run(plan, replicas["catalog"], executor="processes", n_workers=2, results=tmp_path / "out")
    assert set(rmsd.names) == set(rg.names) == adk | yiip and not rmsd.refused and not rg.refused
    assert set(rdf.names) == yiip
    assert {x.member.name for x in rdf.refused} == adk
    assert all(x.analysis == "rdf" and "box" in x.reason for x in rdf.refused)
    for name in ("adk-1", "yiip-1"):
        top, xtc, _ = replicas["members"][name]
        u = universe(top, xtc)
        ca = u.select_atoms("name CA")
        np.testing.assert_allclose(rmsd[name].rmsd, RMSD(ca, select="name CA").run().results.rmsd[:, 2], atol=1e-4)
        np.testing.assert_allclose(rg[name].rgyr, [ca.radius_of_gyration() for _ in u.trajectory], rtol=1e-6)
        if name in yiip:
            ref = InterRDF(ca, ca, nbins=20, range=(2.0, 12.0)).run()
            np.testing.assert_allclose(rdf[name].rdf, ref.results.rdf, rtol=1e-6)
    table = list(csv.DictReader(open(tmp_path / "out" / "refused.csv")))
    assert sorted((t["name"], t["analysis"]) for t in table) == [(n, "rdf") for n in sorted(adk)]
    again = ts.run(plan, ensemble=replicas["catalog"], results=tmp_path / "out", resume=True)
    assert [set(r.names) for r in again] == [adk | yiip, adk | yiip, yiip]
    assert {x.member.name for x in again[2].refused} == adk and not again[0].refused
    assert np.array_equal(again[0]["adk-1"].rmsd, rmsd["adk-1"].rmsd)
    assert len(list(csv.DictReader(open(tmp_path / "out" / "refused.csv")))) == 3


def test_a_glob_with_its_topology_and_quiet_says_the_refusals_in_one_line(troubled, tmp_path):
    """``--ensemble GLOB --topology FILE``; under ``-q`` a partly refused run prints one line, on stderr."""
    from MDAnalysisTests.datafiles import PSF

    for name in ("adk-0.xtc", "adk-1.xtc", "noise.xtc"):
        shutil.copy(troubled / name, tmp_path / name)
    got = run_cli_here("-q", "run", "rmsd", "--ensemble", str(tmp_path / "*.xtc"), "--topology", PSF, "--select",
                       "name CA", "--results", str(tmp_path / "res"), "--executor", "serial", cwd=tmp_path)
    assert got.returncode == 8, got.stderr
    assert got.stdout == ""
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("refused: 1 trajectory;"), got.stderr
    assert str(tmp_path / "res" / "refused.csv") in lines[0] and "noise" in lines[0]
    saved = {t["name"] for t in csv.DictReader(open(tmp_path / "res" / "refused.csv"))}
    assert saved == {"noise"}


def test_a_later_frame_without_a_box_refuses_only_the_analyses_that_need_one(replicas, tmp_path):
    """A trajectory whose second frame has no box (its first has one, so preparing it finds none missing): the
    RDF refuses it, naming the frame, and its RMSD is kept, as MDAnalysis computes it, over its frames cut into
    tasks (the pieces that had a box and the one that had none joined); the other trajectory keeps both."""
    import MDAnalysis as mda
    from MDAnalysis.analysis.rdf import InterRDF
    from MDAnalysis.analysis.rms import RMSD

    top, xtc, _ = replicas["members"]["yiip-1"]
    u = universe(top, xtc)
    with warnings.catch_warnings(), mda.Writer(str(tmp_path / "boxless.xtc"), u.atoms.n_atoms) as w:
        warnings.simplefilter("ignore")
        for ts_ in u.trajectory:
            if ts_.frame == 1:
                ts_.dimensions = None
            w.write(u.atoms)
    (tmp_path / "c.csv").write_text(f"name,topology,trajectory\nboxless,{top},boxless.xtc\n"
                                    f"whole,{top},{replicas['members']['yiip-0'][1]}\n")
    plan = [ts.RMSD(select="name CA"), ts.RDF(select1="name CA", select2="name CA", nbins=20, range=(2.0, 12.0))]
    rmsd, rdf = ts.run(plan, str(tmp_path / "c.csv"), executor="serial", n_tasks=3, results=tmp_path / "res")
    assert set(rmsd.names) == {"boxless", "whole"} and not rmsd.refused
    assert rdf.names == ("whole",) and [(x.member.name, x.analysis) for x in rdf.refused] == [("boxless", "rdf")]
    assert "frame 1" in rdf.refused[0].reason and "box" in rdf.refused[0].reason
    for name, path in (("boxless", str(tmp_path / "boxless.xtc")), ("whole", replicas["members"]["yiip-0"][1])):
        ca = universe(top, path).select_atoms("name CA")
        np.testing.assert_allclose(rmsd[name].rmsd, RMSD(ca, select="name CA").run().results.rmsd[:, 2], atol=1e-4)
    ca = universe(top, replicas["members"]["yiip-0"][1]).select_atoms("name CA")
    np.testing.assert_allclose(rdf["whole"].rdf, InterRDF(ca, ca, nbins=20, range=(2.0, 12.0)).run().results.rdf,
                               rtol=1e-6)
    table = list(csv.DictReader(open(tmp_path / "res" / "refused.csv")))
    assert [(t["name"], t["analysis"]) for t in table] == [("boxless", "rdf")]
