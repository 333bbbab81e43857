"""A Source that carries its own topology says so through ``Source.own_universe()`` (declared on the base
class, not probed for a ``universe`` property): an ensemble member given no topology file is prepared on it."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.ensemble.prepare import SharedTopologies
from trajscale.npy.source import NumpySource


class _CarriesAtoms(NumpySource):
    """A NumPy stack whose atoms come with it (as an mdCATH member's PDB text does)."""

    def own_universe(self):
        return mda.Universe(D.PSF)


def test_a_source_s_own_topology_prepares_the_analysis(tmp_path):
    u = mda.Universe(D.PSF, D.DCD)
    stack = tmp_path / "adk.npy"
    np.save(stack, np.stack([u.atoms.positions.copy() for _ in u.trajectory[:3]]))
    prep = SharedTopologies().prepare(ts.RMSD(select="name CA"), None, _CarriesAtoms(str(stack)))
    np.testing.assert_array_equal(prep.atoms, u.select_atoms("name CA").indices)


def test_the_default_is_the_frames_universe():
    """An MDAnalysis reader's Universe is its own topology; a Source that reads frames itself has none."""
    from trajscale.mdareaders.universe import MDASource

    src = MDASource(D.PSF, D.DCD)
    assert src.own_universe() is src.frames_universe() is not None
    assert NumpySource.own_universe is ts.sources.Source.own_universe
