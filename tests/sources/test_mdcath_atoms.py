"""An mdCATH file's atoms from its own datasets and its text's atom names: φ/ψ features equal to MDAnalysis's
Ramachandran on the Universe of the file's pdbProteinAtoms, labelled from the file, with no Universe built; a
file whose atom datasets are damaged refused alone, with the field named."""

from __future__ import annotations

import io
import re
import shutil
import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.core.selection import ProteinSelection
from MDAnalysis.lib.util import NamedStream
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.mdcath.source import MDCATHSource
from trajscale.testing.mdcath import from_universe, pdb_of, write_mdcath
from trajscale.topology.labelled import PROTEIN_RESNAMES

warnings.filterwarnings("ignore", module="MDAnalysis")

KEY = "320/0"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Three files: AdK with its atom datasets; its residues 1-60 without any (the text alone labels them);
    a copy of the first under another name (the same topology)."""
    folder = tmp_path_factory.mktemp("mdcath_atoms")
    u = mda.Universe(D.PSF, D.DCD)
    adk = from_universe(folder / "mdcath_dataset_1adkA00.h5", u, members=((KEY[:3], KEY[4:]),), n_frames=4)
    part = u.select_atoms("resid 1-60")
    x = np.stack([part.positions for _ in u.trajectory[:3]])
    bare = write_mdcath(folder / "mdcath_dataset_2adkB00.h5", "2adkB00", pdb_of(part), {(KEY[:3], KEY[4:]): x})
    u.trajectory[0]
    shutil.copy(adk, folder / "mdcath_dataset_3adkC00.h5")
    return {"adk": adk, "bare": bare, "copy": str(folder / "mdcath_dataset_3adkC00.h5"),
            "glob": str(folder / "mdcath_dataset_*.h5")}


def mdanalysis_features(path: str):
    """MDAnalysis's Ramachandran on the Universe of the file's pdbProteinAtoms with the member's coordinates:
    (F, 4R) sin/cos and its residues."""
    # here, not at the module's top: it imports matplotlib.pyplot, which every pytest worker would pay at collection
    from MDAnalysis.analysis.dihedrals import Ramachandran as MDARamachandran
    with h5py.File(path, "r") as f:
        dom = f[next(iter(f))]
        u = mda.Universe(NamedStream(io.StringIO(dom["pdbProteinAtoms"][()].decode()), "top.pdb"))
        u.load_new(dom[KEY]["coords"][()])
    r = MDARamachandran(u.select_atoms("protein")).run()
    a = np.deg2rad(r.results.angles.astype(np.float64))
    sc = np.stack([np.sin(a[..., 0]), np.cos(a[..., 0]), np.sin(a[..., 1]), np.cos(a[..., 1])], axis=-1)
    return sc.reshape(len(a), -1), r.ag2.residues


def test_protein_is_mdanalysis_protein():
    assert PROTEIN_RESNAMES == frozenset(ProteinSelection.prot_res)


def test_phi_psi_equal_mdanalysis_labelled_from_the_file_without_a_universe(files):
    r = ts.run(ts.Ramachandran(sincos=True), files["glob"], executor="serial")
    assert not r.refused
    for name, path in (("1adkA00", files["adk"]), ("2adkB00", files["bare"]), ("3adkC00", files["copy"])):
        want, residues = mdanalysis_features(path)
        got = r.arrays()[r.names.index(f"{name}/{KEY}")]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=2e-5)
        labels = r.feature_labels(f"{name}/{KEY}")
        np.testing.assert_array_equal(labels.resid[::4], residues.resids)
        np.testing.assert_array_equal(labels.resname[::4], residues.resnames)
        with h5py.File(path, "r") as f:   # the file's chains where it has them, else MDAnalysis's segments
            dom = f[next(iter(f))]
            chains = dom["chain"][()].astype(str) if "chain" in dom else residues.atoms.segids
        assert set(labels.chain) == set(chains)
    tops = []
    for path in (files["adk"], files["copy"], files["bare"]):
        with MDCATHSource(path, member=KEY) as src:
            tops.append(src.own_universe())
    assert tops[0] is tops[1] and tops[2] is not tops[0]   # one object per distinct topology
    assert all(t.t_build == 0 for t in tops)   # no Universe was built for any of them


def test_a_file_whose_atoms_a_process_read_from_another_is_not_read_again(files, tmp_path, monkeypatch):
    """A later process (nothing in memory) that read a file's atoms takes a second file's from them, told by
    the digest the first run kept of each file's, without loading the second's text and datasets: the same
    topology object, and its features MDAnalysis's; a file of other atoms is read."""
    from trajscale.mdcath import atoms
    from trajscale.util import LRU

    monkeypatch.setenv("TRAJSCALE_CACHE_DIR", str(tmp_path / "cache"))

    def own(path):
        with MDCATHSource(path, member=KEY) as src:
            return src.own_universe()

    stored, read = atoms._stored, []
    monkeypatch.setattr(atoms, "_stored", lambda store, path, prepares: read.append(path) or stored(store, path,
                                                                                                     prepares))
    for _ in range(2):   # a first process (every file read, its digest kept), then a later one
        monkeypatch.setattr(atoms, "_BY_FILE", LRU(atoms.KEPT))
        monkeypatch.setattr(atoms, "_BY_CONTENT", LRU(atoms.KEPT))
        read.clear()
        tops = [own(files[k]) for k in ("adk", "copy", "bare")]
        assert tops[0] is tops[1] and tops[2] is not tops[0]
    assert read == [files["adk"], files["bare"]]   # (the later process: the copy's atoms not loaded)
    r = ts.run(ts.Ramachandran(sincos=True), files["copy"], executor="serial")
    want, residues = mdanalysis_features(files["copy"])
    np.testing.assert_allclose(r.arrays()[0], want, atol=2e-5)
    np.testing.assert_array_equal(r.feature_labels(r.names[0]).resid[::4], residues.resids)


@pytest.mark.parametrize("damage,message", [
    (lambda g: g["resname"].__setitem__(40, b"XYZ"), r"resname of atom 41 is 'XYZ' but pdbProteinAtoms says"),
    (lambda g: g.__delitem__("resid") or g.create_dataset("resid", data=np.ones((2, 5), np.int64)),
     r"resid is \(2, 5\), not one value per atom"),
    (lambda g: g.__delitem__("resid") or g.create_dataset("resid", data=np.arange(10)), "resid holds 10 values"),
    (lambda g: g.__delitem__("chain") or g.create_dataset("chain", data=np.zeros(3341)), "chain holds float64"),
    (lambda g: g["chain"].__setitem__(100, b"B"), "chain does not follow"),
])
def test_a_damaged_atom_dataset_refuses_that_file_alone(files, tmp_path, damage, message):
    shutil.copy(files["adk"], tmp_path / "mdcath_dataset_1adkA00.h5")
    damaged = shutil.copy(files["adk"], tmp_path / "mdcath_dataset_9adkZ00.h5")
    with h5py.File(damaged, "r+") as f:
        damage(f["1adkA00"])
    r = ts.run(ts.Ramachandran(sincos=True), str(tmp_path / "mdcath_dataset_*.h5"), executor="serial")
    assert r.names == (f"1adkA00/{KEY}",)
    assert [x.member.name for x in r.refused] == [f"9adkZ00/{KEY}"]
    assert "mdcath_dataset_9adkZ00.h5" in r.refused[0].reason
    assert re.search(message, r.refused[0].reason), r.refused[0].reason


def test_selections_answered_from_the_files_labels_equal_mdanalysis_on_its_text(files):
    with MDCATHSource(files["adk"], member=KEY) as src:
        top = src.own_universe()
        u = top.real   # MDAnalysis's Universe of the file's pdbProteinAtoms (built by the Source)
        answered = type(top)(top.filename, top.labels, lambda: u, top._selectable)
        for sel in ("backbone and resid 10-20", "name CA", "protein and name N CA", "resname GLY"):
            np.testing.assert_array_equal(answered.select_atoms(sel).indices, u.select_atoms(sel).indices)
        assert answered.t_build == 0
        # the file's chains stand for its segments: a segid selection is MDAnalysis's
        assert answered.answer(("segid A",)) is None
