"""Attributes MDAnalysis guesses (types, masses) are guessed once per distinct name, with its values."""

from __future__ import annotations

import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.guesser.default_guesser import DefaultGuesser
from MDAnalysisTests import datafiles as D

from trajscale.topology import load_universe


@pytest.mark.parametrize("top", [D.GRO, D.PDB, D.PSF], ids=["gro", "pdb", "psf"])
def test_guessed_types_and_masses_equal_mdanalysis(top, monkeypatch):
    monkeypatch.setenv("TRAJSCALE_TOPOLOGY_CACHE", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = mda.Universe(top)
    calls = []
    orig = DefaultGuesser.guess_atom_element
    monkeypatch.setattr(DefaultGuesser, "guess_atom_element",
                        lambda self, name: (calls.append(name), orig(self, name))[1])
    u = load_universe(top, topology_coordinates=False)
    np.testing.assert_array_equal(u.atoms.types, ref.atoms.types)
    np.testing.assert_array_equal(u.atoms.masses, ref.atoms.masses)
    assert len(calls) <= len(np.unique(ref.atoms.names))   # once per distinct name, not per atom
    if top == D.GRO:   # 47,681 atoms, a few dozen names
        assert 0 < len(calls) < 100
