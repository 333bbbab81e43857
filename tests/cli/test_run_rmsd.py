"""``trajscale run rmsd``: prints the selection it used; its numbers are MDAnalysis's."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
from MDAnalysis.analysis import rms

from tests.conftest import run_cli_here


def test_prints_the_selection_it_used(tmp_path, adk_vacuum, adk_vacuum_h5md):
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--out", "d.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "selection: 'protein and name CA' (the default; --select to change)" in proc.stdout
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--select", "backbone", "--ref-frame", "-1",
                   "--mass-weighted", "--out", "b.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "selection: 'backbone'\n" in proc.stdout
    # the default's words, typed out, are the user's choice, not the default
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--select", "protein and name CA",
                   "--out", "c.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "selection: 'protein and name CA'\n" in proc.stdout
    u = mda.Universe(*adk_vacuum)
    for name, kw in [("d.csv", {"select": "protein and name CA"}),
                     ("b.csv", {"select": "backbone", "ref_frame": -1, "weights": "mass"})]:
        want = rms.RMSD(u, **kw).run().results.rmsd
        got = np.loadtxt(tmp_path / name, delimiter=",", skiprows=1)
        np.testing.assert_allclose(got[:, 2], want[:, 2], atol=1e-4)


def test_ref_frame_outside_is_one_clear_line(tmp_path, adk_vacuum, adk_vacuum_h5md):
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--ref-frame", "98", "--out", "x.csv",
                   cwd=tmp_path)
    assert proc.returncode != 0
    assert "reference frame 98 (ref_frame) outside the 98 frames of" in proc.stderr and adk_vacuum_h5md in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "x.csv").exists()
