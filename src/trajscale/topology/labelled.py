"""A topology known from its per-atom labels: its ``"protein"`` and ``"all"`` selections answered from them.

A Source that carries its atoms' names, residues and chains as arrays (an mdCATH file's own datasets)
describes them with :class:`LabelledTopology`: what ``Analysis.prepare`` asks most (the atom count, the
``"protein"`` selection, the labels an analysis names its features with) is answered from those arrays,
without MDAnalysis.  Anything else (another selection, masses, the trajectory) is the real Universe's,
built on first use by the callable the Source gives, as :class:`~.universe.CachedUniverse` builds its own.

``"protein"`` is MDAnalysis's ``ProteinSelection``: the atoms whose residue name is one of
:data:`PROTEIN_RESNAMES` (its ``prot_res``; a test keeps the two equal).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .standin import StandInAtomGroup, StandInUniverse

#: MDAnalysis's ``ProteinSelection.prot_res``: the residue names its ``"protein"`` selects.
PROTEIN_RESNAMES = frozenset({
    "ACE", "ALA", "ALAD", "ARG", "ARGN", "ASF", "ASH", "ASN", "ASN1", "ASP", "ASPH", "CALA", "CARG", "CASF", "CASN",
    "CASP", "CCYS", "CCYX", "CGLN", "CGLU", "CGLY", "CHID", "CHIE", "CHIP", "CILE", "CLEU", "CLYS", "CME", "CMET",
    "CPHE", "CPRO", "CSER", "CTHR", "CTRP", "CTYR", "CVAL", "CYM", "CYS", "CYS1", "CYS2", "CYSH", "CYX", "DAB", "GLH",
    "GLN", "GLU", "GLUH", "GLY", "HID", "HIE", "HIP", "HIS", "HIS1", "HIS2", "HISA", "HISB", "HISD", "HISE", "HISH",
    "HSD", "HSE", "HSP", "HYP", "ILE", "LEU", "LYN", "LYS", "LYSH", "MET", "MSE", "NALA", "NARG", "NASN", "NASP",
    "NCYS", "NCYX", "NGLN", "NGLU", "NGLY", "NHID", "NHIE", "NHIP", "NILE", "NLEU", "NLYS", "NME", "NMET", "NPHE",
    "NPRO", "NSER", "NTHR", "NTRP", "NTYR", "NVAL", "ORN", "PGLU", "PHE", "PRO", "QLN", "SER", "THR", "TRP", "TYR",
    "VAL"})

#: The labels a LabelledTopology holds, one value per atom (text as ``str`` arrays, numbers as int64).
LABELS = ("name", "resname", "resid", "resindex", "segid")


class LabelledTopology(StandInUniverse):
    """A topology's atoms as labels (:data:`LABELS`), with the real Universe built only when asked for more.

    Parameters
    ----------
    filename
        Where the atoms were read (for messages).
    labels
        ``name``, ``resname``, ``segid`` (str arrays), ``resid`` and ``resindex`` (int64; ``resindex`` numbers
        the residues 0, 1, ... in atom order, as MDAnalysis's ``resindices``), one value per atom, checked by the
        caller.
    build
        Builds the real MDAnalysis Universe of the same atoms, in the same order.
    """

    def __init__(self, filename: str, labels: dict[str, np.ndarray], build: Callable[[], object]) -> None:
        super().__init__(filename, build)
        self.labels = {k: labels[k] for k in LABELS}
        self.n_atoms = len(self.labels["name"])

    @property
    def atoms(self) -> LabelledAtomGroup:
        return LabelledAtomGroup(self, np.arange(self.n_atoms))

    def select_atoms(self, *strings, **kw):
        """``Universe.select_atoms``: ``"protein"`` and ``"all"`` from the labels, anything else MDAnalysis's."""
        words = " ".join(strings[0].split()) if len(strings) == 1 and isinstance(strings[0], str) and not kw else None
        if words == "all":
            return self.atoms
        if words == "protein":
            return LabelledAtomGroup(self, np.flatnonzero(self.protein_mask()))
        return self.real.select_atoms(*strings, **kw)

    def protein_mask(self) -> np.ndarray:
        """Whether each atom is in MDAnalysis's ``"protein"`` (its residue name is one of :data:`PROTEIN_RESNAMES`)."""
        names, inverse = np.unique(self.labels["resname"], return_inverse=True)
        return np.array([n in PROTEIN_RESNAMES for n in names], bool)[inverse.reshape(-1)]

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("labels", "real"):   # (not the Universe's: an error inside, or unset)
            raise AttributeError(name)
        return getattr(self.real, name)

    def __repr__(self) -> str:
        return f"<LabelledTopology of {self.filename} ({'built' if self._real is not None else 'not built'})>"


class LabelledAtomGroup(StandInAtomGroup):
    """A selection answered from the labels: ``indices`` and ``n_atoms`` without MDAnalysis; any other attribute
    is the real AtomGroup's (the Universe is built then)."""

    def __init__(self, universe: LabelledTopology, indices: np.ndarray) -> None:
        super().__init__(universe, np.asarray(indices, np.int64))

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("universe", "indices"):
            raise AttributeError(name)
        return getattr(self._real, name)

    def __repr__(self) -> str:
        return f"<LabelledAtomGroup with {self.n_atoms} atoms (labels)>"


__all__ = ["LABELS", "PROTEIN_RESNAMES", "LabelledAtomGroup", "LabelledTopology"]
