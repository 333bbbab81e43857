"""``run rmsf`` says in its summary whether it superposed the frames: without ``--fit-select`` it does
not (MDAnalysis's ``rms.RMSF`` on the coordinates as they are is the reference), and with it, on what."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
from MDAnalysis.analysis import rms

from tests.conftest import run_cli_here


def test_rmsf_says_it_did_not_superpose_without_fit_select(tmp_path, adk_vacuum, adk_vacuum_h5md):
    psf, dcd = adk_vacuum
    out = tmp_path / "rmsf.csv"
    proc = run_cli_here("run", "rmsf", psf, adk_vacuum_h5md, "--out", str(out), "--executor", "serial")
    assert proc.returncode == 0, proc.stderr
    said = [ln for ln in proc.stdout.splitlines() if ln.startswith("rmsf: ")]
    assert len(said) == 1 and "not superposed" in said[0] and "--fit-select" in said[0], proc.stdout
    ca = mda.Universe(psf, dcd).select_atoms("protein and name CA")
    ref = rms.RMSF(ca).run().results.rmsf   # no alignment: what the line says was done
    np.testing.assert_allclose(np.loadtxt(out, delimiter=",", skiprows=1)[:, 1], ref, atol=1e-4)


def test_rmsf_says_what_it_superposed_on(tmp_path, adk_vacuum, adk_vacuum_h5md):
    proc = run_cli_here("run", "rmsf", adk_vacuum[0], adk_vacuum_h5md, "--fit-select", "name CA", "--ref-frame", "3",
                   "--executor", "serial")
    assert proc.returncode == 0, proc.stderr
    said = [ln for ln in proc.stdout.splitlines() if ln.startswith("rmsf: ")]
    assert said == ["rmsf: each frame superposed first, by 'name CA', on the reference (frame 3)"], proc.stdout
