"""An H5MD file with no frames (a writer stopped before its first frame) reads as empty everywhere:
``inspect`` says 0 frames, a run says in one line that there is nothing to analyse, the Source and
trajscale.mda.Reader have 0 frames.  The reference count is the file's own dataset shape, read by h5py
(MDAnalysis's H5MDReader refuses the file: it reads frame 0 when it opens one)."""

from __future__ import annotations

import json

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

import trajscale.mda  # noqa: F401 - registers format "TRAJSCALE"
from trajscale.errors import FrameRangeError
from trajscale.h5md.layout import Layout
from trajscale.h5md.writer import H5MDWriter
from trajscale.sources import open_source

from ..conftest import run_cli_here


@pytest.fixture(scope="module")
def empty_h5md(tmp_path_factory):
    """AdK in water's atoms and masses, positions and forces, no frame."""
    path = tmp_path_factory.mktemp("empty") / "empty.h5md"
    u = mda.Universe(D.GRO)
    H5MDWriter(str(path), u.atoms.n_atoms, layout=Layout.parse("auto"), fields=("position", "force"),
               masses=u.atoms.masses).close()
    with h5py.File(path) as f:
        assert f["particles/all/position/value"].shape == (0, u.atoms.n_atoms, 3)
    return str(path)


def test_inspect_says_zero_frames(empty_h5md):
    r = run_cli_here("inspect", empty_h5md)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "0 frames x 47681 atoms" in r.stdout and "frames x atoms 0 x 47681" in r.stdout, r.stdout
    assert "the file has no frames" in r.stdout
    facts = json.loads(run_cli_here("inspect", empty_h5md, "--json").stdout)
    assert facts["n_frames"] == 0 and facts["warnings"] == [] and facts["time"] is None


def test_a_run_over_it_is_one_line_saying_there_is_nothing_to_analyse(empty_h5md, tmp_path):
    out = tmp_path / "r.csv"
    r = run_cli_here("run", "rmsd", D.GRO, empty_h5md, "--out", str(out), "--no-progress")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert empty_h5md in r.stderr and "no frames" in r.stderr
    assert not out.exists()
    import trajscale as ts

    with pytest.raises(FrameRangeError, match="no frames"):
        ts.run(ts.RMSD(select="name CA"), D.GRO, empty_h5md)


def test_split_says_there_is_nothing_to_split(empty_h5md, tmp_path):
    r = run_cli_here("split", empty_h5md, "-o", str(tmp_path / "parts"), "--parts", "2")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert empty_h5md in r.stderr and "no frames" in r.stderr
    assert not (tmp_path / "parts").exists()


def test_source_and_mda_reader_have_no_frames(empty_h5md):
    src = open_source(empty_h5md)
    try:
        assert (src.n_frames, src.n_atoms) == (0, 47681)
    finally:
        src.close()
    u = mda.Universe(D.GRO, empty_h5md, format="TRAJSCALE")
    r = u.trajectory
    assert (r.n_frames, len(r), r.n_atoms) == (0, 0, 47681)
    assert [ts.frame for ts in r] == [] and list(r[:]) == [] and [ts.frame for ts in r] == []
    with pytest.raises(IndexError):
        r[0]
    assert r.has_forces and not r.has_velocities
    np.testing.assert_array_equal(u.atoms.masses, mda.Universe(D.GRO).atoms.masses)
