"""The parsed-topology cache: same Universe, parser skipped, invalidated by a changed file."""

from __future__ import annotations

import os
import shutil

import MDAnalysis as mda
import numpy as np
from MDAnalysis.analysis import rms

import trajscale as ts
from trajscale.topology import load_universe
from trajscale.topology import parsed_cache as topology_cache


def _same_universe(u, ref) -> None:
    assert u.atoms.n_atoms == ref.atoms.n_atoms
    for attr in ("names", "resids", "resnames", "segids", "masses", "charges", "types"):
        np.testing.assert_array_equal(getattr(u.atoms, attr), getattr(ref.atoms, attr))
    np.testing.assert_array_equal(u.bonds.indices, ref.bonds.indices)
    u.trajectory[5], ref.trajectory[5]
    np.testing.assert_array_equal(u.atoms.positions, ref.atoms.positions)


def test_second_load_skips_the_parser(cache, parses, adk_vacuum):
    ref = mda.Universe(*adk_vacuum)
    parses.clear()
    first = load_universe(adk_vacuum[0], [adk_vacuum[1]])
    second = load_universe(adk_vacuum[0], [adk_vacuum[1]])
    assert len(parses) == 1 and len(list(cache.glob("*.pkl"))) == 1
    _same_universe(first, ref)
    _same_universe(second, ref)
    assert second.filename == adk_vacuum[0]


def test_a_changed_file_is_parsed_again(cache, parses, adk_vacuum, tmp_path):
    psf = tmp_path / "adk.psf"
    shutil.copy(adk_vacuum[0], psf)
    load_universe(str(psf), [adk_vacuum[1]])
    st = psf.stat()
    os.utime(psf, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    load_universe(str(psf), [adk_vacuum[1]])
    assert len(parses) == 2


def test_a_damaged_entry_is_only_a_miss(cache, parses, adk_vacuum):
    ref = mda.Universe(*adk_vacuum)
    parses.clear()
    load_universe(adk_vacuum[0], [adk_vacuum[1]])
    (entry,) = cache.glob("*.pkl")
    entry.write_bytes(b"not a pickle")
    _same_universe(load_universe(adk_vacuum[0], [adk_vacuum[1]]), ref)
    assert len(parses) == 2


def test_cache_can_be_turned_off(cache, parses, adk_vacuum, monkeypatch):
    monkeypatch.setenv("TRAJSCALE_TOPOLOGY_CACHE", "0")
    assert not topology_cache.caches_enabled()
    load_universe(adk_vacuum[0], [adk_vacuum[1]])
    load_universe(adk_vacuum[0], [adk_vacuum[1]])
    assert len(parses) == 2 and not cache.exists()


def test_distance_selections_see_the_trajectory(cache, adk_vacuum, adk_vacuum_h5md):
    """A PSF has no coordinates: an H5MD run evaluates the selection on the trajectory's
    first frame, as MDAnalysis does with Universe(PSF, trajectory) - also from the cache."""
    sel = "name CA and around 6 resid 50"
    u = mda.Universe(*adk_vacuum)
    expected = rms.RMSD(u, select=sel).run().results.rmsd[:, 2]
    for _ in range(2):   # parsed, then cached
        r = ts.run(ts.RMSD(select=sel), adk_vacuum[0], adk_vacuum_h5md)
        np.testing.assert_allclose(r.rmsd, expected, atol=1e-4)


def test_cached_gro_keeps_the_guessed_attributes(cache, adk_water, monkeypatch):
    """A GRO has no types or masses: MDAnalysis guesses them (0.47 s at 47k atoms); a cached load does not."""
    gro = adk_water["gro"]
    ref = mda.Universe(gro)
    first = load_universe(gro)
    guesses = []
    orig = mda.Universe.guess_TopologyAttrs

    def counting(self, context=None, to_guess=None, force_guess=None, **kw):
        guesses.extend(list(to_guess or ()) + list(force_guess or ()))
        return orig(self, context, to_guess, force_guess, **kw)

    monkeypatch.setattr(mda.Universe, "guess_TopologyAttrs", counting)
    second = load_universe(gro)
    assert guesses == []   # nothing guessed again
    for u in (first, second):
        np.testing.assert_array_equal(u.atoms.types, ref.atoms.types)
        np.testing.assert_array_equal(u.atoms.masses, ref.atoms.masses)
        np.testing.assert_array_equal(u.atoms.positions, ref.atoms.positions)
    # a universe without coordinates (trajscale's H5MD path) too
    bare = load_universe(gro, topology_coordinates=False)
    assert guesses == []
    np.testing.assert_array_equal(bare.atoms.masses, ref.atoms.masses)
    assert bare.select_atoms("protein and name CA").n_atoms == ref.select_atoms("protein and name CA").n_atoms
