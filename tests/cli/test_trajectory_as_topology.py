"""A trajectory file as the topology: never a traceback. An XTC has no masses: an unweighted RMSD runs, a
mass-weighted request is one line. An H5MD file that stores its atoms (names, masses, residues; written by
``convert`` or ``ParallelWriter(topology=u)``) is its own topology."""

from __future__ import annotations

import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

from tests.conftest import run_cli_here

warnings.filterwarnings("ignore", module="MDAnalysis")


def _csv(path) -> np.ndarray:
    return np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)


def test_xtc_as_topology_unweighted_rmsd_runs_as_mdanalysis(tmp_path):
    proc = run_cli_here("run", "rmsd", D.XTC, D.XTC, "--trajectory-as-topology", "--select", "all", "--out", "r.csv",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    want = rms.RMSD(mda.Universe(D.GRO, D.XTC), select="all").run().results.rmsd[:, 2]
    np.testing.assert_allclose(_csv(tmp_path / "r.csv")[:, 2], want, atol=1e-4)


@pytest.mark.parametrize("args", [["rmsd", "--select", "all", "--mass-weighted"], ["rgyr", "--select", "all"]])
def test_mass_weighted_without_masses_is_one_line(tmp_path, args):
    proc = run_cli_here("run", args[0], D.XTC, D.XTC, "--trajectory-as-topology", *args[1:], "--out", "x.csv",
                   cwd=tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert D.XTC in proc.stderr and "no atom masses" in proc.stderr
    assert not (tmp_path / "x.csv").exists()


def _check_own_topology(tmp_path, h5):
    u = mda.Universe(D.PSF, D.DCD)
    sel = "resid 10-50 and name CA"
    proc = run_cli_here("run", "rmsd", h5, h5, "--select", sel, "--mass-weighted", "--out", "r.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr   # no --trajectory-as-topology: the file has names and residues
    want = rms.RMSD(u, select=sel, weights="mass").run().results.rmsd[:, 2]
    np.testing.assert_allclose(_csv(tmp_path / "r.csv")[:, 2], want, atol=1e-4)
    proc = run_cli_here("run", "rgyr", h5, h5, "--select", "segid 4AKE and backbone", "--out", "g.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    bb = u.select_atoms("segid 4AKE and backbone")
    want = [bb.radius_of_gyration() for _ in u.trajectory]
    np.testing.assert_allclose(_csv(tmp_path / "g.csv")[:, -1], want, rtol=1e-5)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_h5md_written_by_convert_is_its_own_topology(tmp_path):
    h5 = str(tmp_path / "c.h5md")
    assert run_cli_here("convert", D.PSF, D.DCD, "-o", h5, "--no-progress").returncode == 0
    _check_own_topology(tmp_path, h5)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_h5md_written_by_parallel_writer_with_topology_is_its_own_topology(tmp_path):
    from trajscale.pwrite import ParallelWriter

    u = mda.Universe(D.PSF, D.DCD)
    h5 = str(tmp_path / "p.h5md")
    ids = np.arange(u.atoms.n_atoms)
    with ParallelWriter(h5, u.atoms.n_atoms, topology=u, box=None) as w:
        for t in u.trajectory:
            w.write(step=t.frame, time=t.time, ids=ids, positions=u.atoms.positions)
    _check_own_topology(tmp_path, h5)
