"""A topology known from its per-atom labels: its ``"protein"`` and ``"all"`` selections answered from them.

A Source that carries its atoms' labels as arrays (an mdCATH file's datasets) answers the atom count, common
selections and the features' labels without MDAnalysis; anything else is the real Universe's, built on first
use. ``"protein"`` is MDAnalysis's ``ProteinSelection`` (a test keeps :data:`PROTEIN_RESNAMES` equal to its
``prot_res``); a selection :func:`select_from_labels` cannot answer exactly as MDAnalysis does is MDAnalysis's.
"""

from __future__ import annotations

import re
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

#: The labels a LabelledTopology holds, one value per atom (text as ``str`` arrays, numbers as int64); an
#: ``icode`` (insertion codes) too where the Source has them (``resid`` selections need them).
LABELS = ("name", "resname", "resid", "resindex", "segid")

#: MDAnalysis's ``BackboneSelection.bb_atoms``.
BACKBONE_NAMES = frozenset({"N", "CA", "C", "O"})

#: A plain value of ``name``, ``resname`` or ``segid`` (upper case: no selection keyword is; no wildcard).
_PLAIN = re.compile(r"[A-Z0-9_']+")
#: A plain ``resid`` value: a number, or a range of two.
_RESID = re.compile(r"(\d+)(?:[-:](\d+))?")
_FIELD = {"name": "name", "resname": "resname", "segid": "segid"}


def select_from_labels(labels: dict[str, np.ndarray], selection: str,
                       fields: frozenset = frozenset({"name", "resname", "resid", "segid"})) -> np.ndarray | None:
    """The atoms MDAnalysis's ``select_atoms(selection)`` selects, from ``labels``; None where not answered here."""
    words = selection.split()
    if not words:
        return None
    clauses, current = [], []
    for w in words:
        if w == "and":
            if not current:
                return None
            clauses.append(current)
            current = []
        else:
            current.append(w)
    if not current:
        return None
    clauses.append(current)
    mask = np.ones(len(labels["name"]), bool)
    for clause in clauses:
        if clause[0] in ("name", "resname", "resid", "segid") and clause[0] not in fields:
            return None
        m = _clause(labels, clause)
        if m is None:
            return None
        mask &= m
    return np.flatnonzero(mask)


def _clause(labels: dict[str, np.ndarray], clause: list[str]) -> np.ndarray | None:
    key, values = clause[0], clause[1:]
    if key in ("all", "protein", "backbone"):
        if values:
            return None
        if key == "all":
            return np.ones(len(labels["name"]), bool)
        protein = _isin(labels["resname"], PROTEIN_RESNAMES)
        return protein if key == "protein" else protein & _isin(labels["name"], BACKBONE_NAMES)
    if not values:
        return None
    if key in _FIELD:
        if not all(_PLAIN.fullmatch(v) for v in values):
            return None
        return _isin(labels[_FIELD[key]], frozenset(values))
    if key == "resid" and "icode" in labels:
        resid, blank = labels["resid"], np.char.str_len(labels["icode"]) == 0
        mask = np.zeros(len(resid), bool)
        for v in values:
            found = _RESID.fullmatch(v)
            if found is None:
                return None
            lo = int(found[1])
            hi = lo if found[2] is None else int(found[2])
            if hi < lo:
                return None
            # (MDAnalysis, with insertion codes: the first number with any code, the last and a single one
            # with none, those between with any)
            first = (resid == lo) if hi > lo else np.zeros(len(resid), bool)
            mask |= first | ((resid > lo) & (resid < hi)) | ((resid == hi) & blank)
        return mask
    return None


def _isin(values: np.ndarray, wanted: frozenset) -> np.ndarray:
    """Whether each value is one of ``wanted`` (asked once per distinct value)."""
    names, inverse = np.unique(values, return_inverse=True)
    return np.array([n in wanted for n in names.tolist()], bool)[inverse.reshape(-1)]


class LabelledTopology(StandInUniverse):
    """A topology's atoms as labels (:data:`LABELS`), with the real Universe built only when asked for more.

    Parameters
    ----------
    filename
        Where the atoms were read (for messages).
    labels
        ``name``, ``resname``, ``segid`` (str arrays), ``resid`` and ``resindex`` (int64, as MDAnalysis's
        ``resindices``), one value per atom, checked by the caller.
    build
        Builds the real MDAnalysis Universe of the same atoms, in the same order.
    selectable
        The labels whose values are the real Universe's own, which selections may name.
    """

    def __init__(self, filename: str, labels: dict[str, np.ndarray], build: Callable[[], object],
                 selectable: frozenset = frozenset({"name", "resname", "resid"})) -> None:
        super().__init__(filename, build)
        self.labels = {k: labels[k] for k in (*LABELS, "icode") if k in labels}
        self.n_atoms = len(self.labels["name"])
        self._selectable = selectable
        #: selection -> its indices (read-only), or None: every member sharing this topology asks the same ones
        self._answers: dict[str, np.ndarray | None] = {}

    @property
    def atoms(self) -> LabelledAtomGroup:
        return LabelledAtomGroup(self, np.arange(self.n_atoms))

    def select_atoms(self, *strings, **kw):
        """``Universe.select_atoms``: from the labels where :func:`select_from_labels` answers, else MDAnalysis's."""
        indices = self.answer(strings) if not kw else None
        if indices is not None:
            return LabelledAtomGroup(self, indices)
        return self.real.select_atoms(*strings, **kw)

    def answer(self, strings: tuple) -> np.ndarray | None:
        """The indices a selection of one string selects, from the labels; None where MDAnalysis must answer."""
        if len(strings) != 1 or not isinstance(strings[0], str):
            return None
        selection = strings[0]
        if selection not in self._answers:   # (answered once per topology: the labels never change)
            found = select_from_labels(self.labels, selection, self._selectable)
            if found is not None:
                found.setflags(write=False)
            self._answers[selection] = found
        return self._answers[selection]

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("labels", "real"):   # (not the Universe's: an error inside, or unset)
            raise AttributeError(name)
        return getattr(self.real, name)

    def __repr__(self) -> str:
        return f"<LabelledTopology of {self.filename} ({'built' if self._real is not None else 'not built'})>"


class LabelledAtomGroup(StandInAtomGroup):
    """A selection answered from the labels: ``indices`` and ``n_atoms``; anything else is the real AtomGroup's."""

    def __init__(self, universe: LabelledTopology, indices: np.ndarray) -> None:
        super().__init__(universe, np.asarray(indices, np.int64))

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("universe", "indices"):
            raise AttributeError(name)
        return getattr(self._real, name)

    def __repr__(self) -> str:
        return f"<LabelledAtomGroup with {self.n_atoms} atoms (labels)>"


__all__ = ["BACKBONE_NAMES", "LABELS", "PROTEIN_RESNAMES", "LabelledAtomGroup", "LabelledTopology",
           "select_from_labels"]
