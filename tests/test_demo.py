"""The demo prints the same RMSD through MDAnalysis serial, trajscale serial and trajscale processes."""

from __future__ import annotations

import re

from trajscale.demo import run_demo


def test_demo_compares_the_three_runs(tmp_path, capsys):
    assert run_demo(str(tmp_path), n_frames=20, n_workers=2, executor="processes") == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^  (MDAnalysis serial|trajscale serial|trajscale processes x2) +([\d.]+) s .*"
                      r"max \|diff\| ([\d.e+-]+) A$", out, re.M)
    assert [r[0] for r in rows] == ["MDAnalysis serial", "trajscale serial", "trajscale processes x2"], out
    assert all(float(r[2]) < 1e-4 for r in rows), out   # the same RMSD as MDAnalysis on every row
    assert (tmp_path / "rmsd.csv").exists() and (tmp_path / "report.json").exists()
