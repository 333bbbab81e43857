"""Labelled features: φ/ψ atoms picked as MDAnalysis's Ramachandran picks them (without it), labels from
MDAnalysis's own residues and atoms, pair distances and residue contacts against MDAnalysis and NumPy float64."""

from __future__ import annotations

import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.lib.distances import calc_bonds, distance_array
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.analysis.residues import atom_table, backbone_quintuples

warnings.filterwarnings("ignore", module="MDAnalysis")


def mda_rama(u, select):
    # here, not at the module's top: it imports matplotlib.pyplot, which every pytest worker would pay at collection
    from MDAnalysis.analysis.dihedrals import Ramachandran as MDARamachandran
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MDARamachandran(u.select_atoms(select))


@pytest.fixture(scope="module")
def adk():
    return mda.Universe(D.PSF, D.DCD)


@pytest.mark.parametrize("files, select", [((D.PSF, D.DCD), "protein"),
                                           ((D.PSF, D.DCD), "resid 10-30 or resid 50-52 or resid 214"),
                                           ((D.GRO,), "protein"), ((D.GRO_MEMPROT,), "protein")])
def test_backbone_atoms_are_mdanalysis_ramachandrans(files, select):
    """The five atoms of each residue kept, for AdK (PSF, one segment), AdK in water (GRO) and YiiP (GRO, two
    chains numbered alike), and a selection with gaps and the last residue."""
    u = mda.Universe(*files)
    rama = mda_rama(u, select)
    quint, residues = backbone_quintuples(atom_table(u), u.select_atoms(select).indices,
                                          u.select_atoms("protein").indices)
    ref = np.stack([ag.indices for ag in (rama.ag1, rama.ag2, rama.ag3, rama.ag4, rama.ag5)])
    np.testing.assert_array_equal(quint, ref)
    np.testing.assert_array_equal(residues, rama.ag2.resindices)


def test_a_residue_outside_the_protein_is_refused():
    u = mda.Universe(D.GRO)
    with pytest.raises(ValueError, match="outside of protein"):
        mda_rama(u, "resname SOL")   # (MDAnalysis refuses it too)
    with pytest.raises(ts.errors.SelectionError, match="outside of protein"):
        ts.run(ts.Ramachandran("protein or resname SOL"), D.GRO, D.XTC, stop=1)


@pytest.mark.parametrize("sincos", [False, True])
def test_ramachandran_labels_and_array(adk, sincos):
    r = ts.run(ts.Ramachandran(sincos=sincos), D.PSF, D.DCD, stop=5)
    rama = mda_rama(adk, "protein")
    kinds = ["sin(phi)", "cos(phi)", "sin(psi)", "cos(psi)"] if sincos else ["phi", "psi"]
    k = len(kinds)
    labels = r.feature_labels()
    assert len(labels) == k * rama.ag2.n_atoms
    np.testing.assert_array_equal(labels.resid, np.repeat(rama.ag2.resids, k))
    np.testing.assert_array_equal(labels.resname, np.repeat(rama.ag2.resnames, k))
    np.testing.assert_array_equal(labels.chain, np.repeat(rama.ag2.segids, k))
    assert list(labels.feature[:k]) == kinds
    res = rama.ag2.residues[0]
    assert list(labels)[0] == f"{res.resname} {res.resid} {res.segid} {kinds[0]}"
    ref = np.deg2rad(rama.run(stop=5).results.angles.astype(np.float64))
    if sincos:
        ref = np.stack([np.sin(ref[..., 0]), np.cos(ref[..., 0]), np.sin(ref[..., 1]), np.cos(ref[..., 1])], axis=-1)
        np.testing.assert_allclose(r.array(), ref.reshape(5, -1), atol=2e-5)
    else:
        diff = (r.array() - np.rad2deg(ref).reshape(5, -1) + 180) % 360 - 180
        assert np.abs(diff).max() < 1e-3
    assert r.array().dtype == np.float64 and r.array().shape == (5, len(labels))


def test_ramachandran_labels_saved_with_the_result(tmp_path):
    import h5py

    r = ts.run(ts.Ramachandran(sincos=True), D.PSF, D.DCD, stop=3)
    r.save(tmp_path / "rama.h5")
    with h5py.File(tmp_path / "rama.h5") as f:
        assert [x.decode() for x in f["feature_feature"][:4]] == ["sin(phi)", "cos(phi)", "sin(psi)", "cos(psi)"]
        np.testing.assert_array_equal(f["feature_resid"][:], r.feature_labels().resid)
    r.save(tmp_path / "rama.csv")
    header = (tmp_path / "rama.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["frame", "time", "ARG 2 4AKE sin(phi)"]


def test_pair_distances_labelled_as_mdanalysis_computes_them(adk):
    sel1, sel2 = "name CA and resid 10-14", "name CA and resid 80-84"
    r = ts.run(ts.Distances(sel1, sel2, pbc=False), D.PSF, D.DCD, stop=4)
    g1, g2 = adk.select_atoms(sel1), adk.select_atoms(sel2)
    ref = np.array([calc_bonds(g1.positions, g2.positions) for _ in adk.trajectory[:4]], np.float64)
    np.testing.assert_allclose(r.array(), ref, rtol=1e-6)
    labels = r.feature_labels()
    assert list(labels) == [f"CA {a} - CA {b}" for a, b in zip(g1.resids, g2.resids, strict=True)]
    np.testing.assert_array_equal(labels.resname, g1.resnames)
    allpairs = ts.run(ts.Distances(sel1, sel2, pairs=False, pbc=False), D.PSF, D.DCD, stop=2)
    assert allpairs.array().shape == (2, 25)
    assert list(allpairs.feature_labels())[1] == f"CA {g1.resids[0]} - CA {g2.resids[1]}"


def test_residue_contacts_equal_numpy_minimum_distances(adk):
    """Each residue pair's minimum heavy-atom distance, and 0/1 under a cutoff: against MDAnalysis's
    distance_array in float64 and a per-pair minimum."""
    select = "resid 1-12 and not name H*"
    r = ts.run(ts.ResidueContacts(select, pbc=False), D.PSF, D.DCD, stop=3)
    cut = ts.run(ts.ResidueContacts(select, cutoff=6.0, pbc=False), D.PSF, D.DCD, stop=3)
    atoms = adk.select_atoms(select)
    res = atoms.resindices
    ures = np.unique(res)
    pairs = [(a, b) for a in ures for b in ures if b - a >= 3]
    ref = []
    for _ in adk.trajectory[:3]:
        d = distance_array(atoms.positions.astype(np.float64), atoms.positions.astype(np.float64))
        ref.append([d[np.ix_(res == a, res == b)].min() for a, b in pairs])
    ref = np.array(ref)
    assert r.array().shape == (3, len(pairs))
    np.testing.assert_allclose(r.array(), ref, rtol=1e-6)
    np.testing.assert_array_equal(cut.array(), (ref <= 6.0).astype(float))
    first = adk.residues[pairs[0][0]], adk.residues[pairs[0][1]]
    assert list(r.feature_labels())[0] == f"{first[0].resname} {first[0].resid} - {first[1].resname} {first[1].resid}"


def test_the_docs_say_the_contact_pairs_the_default_gives(adk):
    """docs/ensembles.md's count of AdK's residue pairs is the default's: every pair at least 3 residues apart
    (counted from MDAnalysis's residues)."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "ensembles.md").read_text()
    said = re.search(r"\(([\d,]+) pairs for AdK's (\d+) residues", text)
    assert said, "docs/ensembles.md no longer says AdK's pair count"
    n_res = adk.select_atoms("protein and not name H*").n_residues
    want = sum(1 for a in range(n_res) for b in range(a + 3, n_res))
    got = ts.run(ts.ResidueContacts(pbc=False), D.PSF, D.DCD, stop=1).array().shape[1]
    assert (int(said.group(1).replace(",", "")), int(said.group(2))) == (got, n_res) and got == want


@pytest.mark.parametrize("files", [(D.PSF, D.DCD), (D.GRO, D.XTC)])
def test_omega_and_chi1_where_the_residue_has_them(files):
    """Each residue's φ, ψ, then ω and χ1 where MDAnalysis's ``omega_selection``/``chi1_selection`` give
    them, against MDAnalysis's ``Dihedral`` on those atoms (AdK in vacuum; in a triclinic water box)."""
    from MDAnalysis.analysis.dihedrals import Dihedral

    u = mda.Universe(*files)
    r = ts.run(ts.Ramachandran(omega=True, chi1=True), *files, stop=3)
    rama = mda_rama(u, "protein")
    groups, kinds, resids = [], [], []
    for res, *quint in zip(rama.ag2.residues, rama.ag1, rama.ag2, rama.ag3, rama.ag4, rama.ag5, strict=True):
        for kind, atoms in (("phi", quint[:4]), ("psi", quint[1:]), ("omega", res.omega_selection()),
                            ("chi1", res.chi1_selection())):
            if atoms is not None:
                groups.append(sum(atoms) if kind in ("phi", "psi") else atoms)
                kinds.append(kind)
                resids.append(res.resid)
    assert "chi1" in kinds and kinds.count("chi1") < len(rama.ag2)   # (glycines and alanines have none)
    labels = r.feature_labels()
    assert list(labels.feature) == kinds
    np.testing.assert_array_equal(labels.resid, resids)
    ref = Dihedral(groups).run(stop=3).results.angles
    diff = (r.array() - ref + 180) % 360 - 180
    assert np.abs(diff).max() < 1e-3
