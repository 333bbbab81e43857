"""A PDB or GRO topology read from its fixed columns: every PDB and GRO of MDAnalysisTests' data labelled as
MDAnalysis's Universe labels it (or declined), its masses those MDAnalysis guesses, the selections answered
from the labels equal to MDAnalysis's, a cold PDB topology prepared without a Universe with the bits of a run on
MDAnalysis's Universe, and a damaged PDB declined (MDAnalysis answers) rather than read otherwise."""

from __future__ import annotations

import glob
import os
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.core._get_readers import get_parser_for
from MDAnalysis.core.selection import BackboneSelection
from MDAnalysis.topology.PDBParser import PDBParser
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.planning import AnalysisTopology
from trajscale.sources import open_source
from trajscale.topology import CachedUniverse, file_labels, load_universe, pdb_labels
from trajscale.topology import labels as labels_module
from trajscale.topology.columns import guessed_masses
from trajscale.topology.labelled import BACKBONE_NAMES, select_from_labels

warnings.filterwarnings("ignore", module="MDAnalysis")

PDBS, GROS = ([p for pattern in patterns for p in sorted(glob.glob(os.path.join(os.path.dirname(D.PDB), "**", pattern),
                                                                  recursive=True))]
              for patterns in (("*.pdb", "*.PDB", "*.ent"), ("*.gro",)))

#: Selections answered from the labels (each checked against MDAnalysis's on every PDB).
ANSWERED = ("all", "protein", "backbone", "name CA", "protein and name CA", "name N CA C O and protein",
            "name CA and resid 1-100", "resid 5", "resid 3-3", "resid 10:20 and name CA", "resid 1-10 50",
            "resname ALA GLY", "segid A", "segid SYSTEM", "protein and backbone and resid 2-8")

#: Selections left to MDAnalysis.
NOT_ANSWERED = ("name CA or name CB", "not protein", "name C*", "(protein)", "name ca", "resid 5A", "resid 1 to 5",
                "resid 10-5", "protein and", "and protein", "around 5 protein", "bynum 1-10", "name")

LABELS = {"name": "names", "resname": "resnames", "resid": "resids", "resindex": "resindices", "segid": "segids",
          "icode": "icodes"}


def test_backbone_is_mdanalysis_backbone():
    assert frozenset(BackboneSelection.bb_atoms) == BACKBONE_NAMES


def _mdanalysis_atoms(path: str):
    """MDAnalysis's atoms of the topology file (its parser, then its guesser, as a Universe of the file makes
    them; None where MDAnalysis cannot read it)."""
    try:
        with get_parser_for(path)(path) as parser:
            return mda.Universe(parser.parse()).atoms
    except (OSError, ValueError):
        return None


@pytest.mark.parametrize("files,least_read", [(PDBS, 41), (GROS, 19)], ids=["pdb", "gro"])
def test_every_pdb_and_gro_of_the_test_data_labelled_as_mdanalysis_labels_it(files, least_read):
    read = 0
    for path in files:
        labels = file_labels(path)
        atoms = _mdanalysis_atoms(path)
        if atoms is None:   # (a GRO without a name, or a line cut short: MDAnalysis refuses it)
            assert labels is None, path
            continue
        if labels is None:   # declined: MDAnalysis reads it
            continue
        read += 1
        for label, attr in LABELS.items():
            if not hasattr(atoms, attr):   # (a GRO has no insertion codes: those read are blank)
                assert label == "icode" and not (np.char.str_len(labels[label]) > 0).any(), path
                continue
            want = np.asarray(getattr(atoms, attr))
            np.testing.assert_array_equal(labels[label], want.astype(labels[label].dtype), err_msg=f"{path} {label}")
        np.testing.assert_array_equal(guessed_masses(labels), atoms.masses, err_msg=f"{path} masses")
        n, kept = labels_module._from_columns(path)   # what the labels' cache keeps: as read from MDAnalysis's atoms
        n_mda, want = labels_module._labels_of(atoms, labels_module.LABELS)
        assert n == n_mda and kept.keys() == want.keys(), path
        for label, values in want.items():
            assert kept[label].dtype == values.dtype or kept[label].dtype.kind == values.dtype.kind == "U", label
            np.testing.assert_array_equal(kept[label], values, err_msg=f"{path} {label}")
        for sel in ANSWERED:
            got = select_from_labels(labels, sel)
            assert got is not None, sel
            np.testing.assert_array_equal(got, atoms.select_atoms(sel).indices, err_msg=f"{path} {sel!r}")
        for sel in NOT_ANSWERED:
            assert select_from_labels(labels, sel) is None, sel
    assert read >= least_read   # (every PDB; the GROs but those whose residue numbers wrap)


@pytest.fixture(scope="module")
def adk_xtc(tmp_path_factory) -> str:
    """5 frames of AdK in vacuum (the DCD's, 3,341 atoms, the atoms of ``PDB_small``) as XTC."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    path = str(tmp_path_factory.mktemp("pdb_xtc") / "adk.xtc")
    frames = mda.Universe(D.PSF, D.DCD).trajectory.timeseries(order="fac")[:5]
    with XTCFile(path, "w") as f:
        for j, x in enumerate(frames):
            f.write(x / 10.0, np.eye(3, dtype=np.float32) * 8.0, j, float(j))
    return path


@pytest.mark.parametrize("ext", [".pdb", ".gro"])
@pytest.mark.parametrize("analysis", [ts.Ramachandran(select="protein", sincos=True), ts.RMSD(select="name CA"),
                                      ts.RMSD(select="backbone and resid 10-100"),
                                      ts.RadiusOfGyration(select="protein"),   # (masses: guessed as MDAnalysis)
                                      ts.CentreOfMassDistance("resid 1-50", "resid 150-214")])
def test_a_cold_pdb_or_gro_is_prepared_without_a_universe_with_the_bits_of_mdanalysis_universe(
        cache, tmp_path, analysis, adk_xtc, ext):
    top = str(tmp_path / f"adk{ext}")   # (a file new to the caches)
    if ext == ".pdb":
        with open(D.PDB_small) as src, open(top, "w") as dst:
            dst.write(src.read())
    else:
        mda.Universe(D.PDB_small).atoms.write(top)
    with open_source(adk_xtc) as source:
        at = AnalysisTopology(top, source)
        analysis.prepare(at.atoms, source)
        assert isinstance(at.atoms, CachedUniverse) and at.build_seconds == 0   # no Universe was built
    got = ts.run(analysis, top, adk_xtc, executor="serial")
    want = ts.run(analysis, mda.Universe(top), adk_xtc, executor="serial")   # MDAnalysis's Universe: today's path
    name = "rmsd" if isinstance(analysis, ts.RMSD) else "values"
    np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    with open_source(adk_xtc) as source:   # the next run: from the selection cache
        at = AnalysisTopology(top, source)
        analysis.prepare(at.atoms, source)
        assert at.build_seconds == 0


@pytest.mark.parametrize("damage", [
    lambda lines: lines[:40] + [lines[40][:20]] + lines[41:],                           # a truncated record
    lambda lines: lines[:40] + [lines[40][:22] + "A000" + lines[40][26:]] + lines[41:],  # hybrid-36 resid
    lambda lines: lines[:40] + [lines[40][:22] + " x12" + lines[40][26:]] + lines[41:],  # not a number
    lambda lines: lines[:40] + [lines[40][:22] + "+ 12" + lines[40][26:]] + lines[41:],
    lambda lines: lines[:40] + ["\t" + lines[40]] + lines[41:],                          # a tab
])
def test_a_damaged_pdb_is_declined_and_mdanalysis_answers(cache, tmp_path, damage):
    lines = open(D.PDB_small).read().splitlines()
    first = next(k for k, line in enumerate(lines) if line.startswith("ATOM"))
    lines = lines[:first] + damage(lines[first:])
    top = tmp_path / "damaged.pdb"
    top.write_text("\n".join(lines) + "\n")
    assert pdb_labels(str(top)) is None
    with PDBParser(str(top)) as parser:   # (the topology alone: a truncated record has no coordinates)
        atoms = mda.Universe(parser.parse()).atoms
    u = CachedUniverse(str(top), lambda: load_universe(str(top), topology_coordinates=False))
    np.testing.assert_array_equal(u.select_atoms("protein and name CA").indices,
                                  atoms.select_atoms("protein and name CA").indices)
    assert u.t_build > 0   # MDAnalysis answered


def test_windows_newlines_and_leading_blanks_read_as_mdanalysis_reads_them(tmp_path):
    lines = open(D.PDB_small).read().splitlines()
    top = tmp_path / "crlf.pdb"
    top.write_bytes(("\r\n".join("  " + line if line.startswith("ATOM") and k % 3 else line
                                 for k, line in enumerate(lines)) + "\r\n").encode())
    labels = pdb_labels(str(top))
    assert labels is not None
    with PDBParser(str(top)) as parser:   # (MDAnalysis's topology: its PDB coordinate reader keeps the blanks)
        atoms = mda.Universe(parser.parse()).atoms
    for label, attr in LABELS.items():
        np.testing.assert_array_equal(labels[label], np.asarray(getattr(atoms, attr)).astype(labels[label].dtype))


def test_a_labelled_topology_answers_each_selection_once_as_mdanalysis_selects():
    """Members sharing a topology ask it the same selections: each is answered from the labels once (the
    same read-only indices again), equal to MDAnalysis's, and a selection it cannot answer stays MDAnalysis's."""
    from trajscale.topology.labelled import LabelledTopology

    u = mda.Universe(D.PDB_small)
    labels = {k: np.asarray(getattr(u.atoms, v)) for k, v in LABELS.items() if k != "icode"}
    labels["resid"], labels["resindex"] = labels["resid"].astype(np.int64), labels["resindex"].astype(np.int64)
    top = LabelledTopology(D.PDB_small, {k: (v.astype(str) if v.dtype == object else v) for k, v in labels.items()},
                           lambda: u)
    first = top.answer(("protein",))
    assert top.answer(("protein",)) is first and not first.flags.writeable
    np.testing.assert_array_equal(first, u.select_atoms("protein").indices)
    np.testing.assert_array_equal(top.answer(("name CA",)), u.select_atoms("name CA").indices)
    assert top.answer(("not protein",)) is None and top.answer(("not protein",)) is None
