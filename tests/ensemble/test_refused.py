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
from tests.conftest import run_cli
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


@pytest.mark.cli
def test_the_command_exits_8_and_writes_the_refused_table(troubled, tmp_path):
    out = tmp_path / "rmsd.parquet"
    got = run_cli("run", "rmsd", "--ensemble", str(troubled / "troubled.csv"), "--select", "name CA",
                  "--results", str(tmp_path / "res"), "--out", str(out), "--executor", "serial", cwd=tmp_path)
    assert got.returncode == 8, got.stderr
    assert "refused: 3 trajectories" in got.stdout
    assert [t["name"] for t in csv.DictReader(open(tmp_path / "res" / "refused.csv"))] == ["missing", "noise", "nan"]
    import pyarrow.parquet as pq

    assert set(pq.read_table(out)["trajectory"].to_pylist()) == {"adk-0", "adk-1", "adk-2", "yiip-0", "yiip-1"}
    strict = run_cli("run", "rmsd", "--ensemble", str(troubled / "troubled.csv"), "--select", "name CA",
                     "--results", str(tmp_path / "res2"), "--strict", cwd=tmp_path)
    assert strict.returncode == 2 and "strict" in strict.stderr and "Traceback" not in strict.stderr
