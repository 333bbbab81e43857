"""A topology's atoms and residues as plain arrays: what features are labelled with, and the backbone's
dihedral atoms found from them.

:func:`derived` keeps what an analysis computes from them per topology object, so ensemble members that share
a topology compute it once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from ..block import sorted_unique

#: Derived values per topology object (a CachedUniverse or an MDAnalysis Universe), freed with it.
_DERIVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True, eq=False)
class AtomTable:
    """One value per atom of a topology: ``name``, ``resname``, ``segid`` (str), ``resid``, ``resindex``
    (int64, MDAnalysis's residue index)."""

    name: np.ndarray
    resname: np.ndarray
    resid: np.ndarray
    resindex: np.ndarray
    segid: np.ndarray

    @property
    def n_residues(self) -> int:
        return int(self.resindex.max()) + 1 if len(self.resindex) else 0

    def residues(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per residue (by residue index): its name, number and segment ID (those of its first atom)."""
        n = self.n_residues
        first = np.full(n, len(self.resindex), np.int64)
        np.minimum.at(first, self.resindex, np.arange(len(self.resindex)))
        first = np.minimum(first, len(self.resindex) - 1)
        return self.resname[first], self.resid[first], self.segid[first]


def topology_of(universe):
    """The whole topology an analysis prepares on (a selection given as an AtomGroup: its Universe)."""
    return getattr(universe, "universe", universe)


def derived(universe, key: Hashable, compute: Callable[[], object]):
    """``compute()``, kept per topology object and ``key`` (the analysis's name and configuration)."""
    top = topology_of(universe)
    try:
        memo = _DERIVED.setdefault(top, {})
    except TypeError:   # (an object that cannot be weakly referenced: computed every time)
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def atom_table(universe) -> AtomTable:
    """The per-atom names, residues and segments of ``universe``'s topology (the module's docstring)."""
    return derived(universe, ("atom_table",), lambda: _atom_table(topology_of(universe)))


def _atom_table(top) -> AtomTable:
    from ..topology import CachedUniverse, LabelledTopology, atom_labels

    if isinstance(top, LabelledTopology):   # (a Source's own labels, checked when read)
        return _table(top.n_atoms, top.labels.get)
    if isinstance(top, CachedUniverse):   # (the labels' cache answers, or the Universe built fills it)
        n, labels = atom_labels(top.filename, atoms=top.real.atoms if top.t_build else None)
        if {"name", "resid", "resindex"} <= labels.keys():
            return _table(n, labels.get)
    atoms = top.atoms if not isinstance(top, CachedUniverse) else top.real.atoms
    attrs = {"name": "names", "resname": "resnames", "resid": "resids", "resindex": "resindices", "segid": "segids"}

    def get(label):
        try:
            return np.asarray(getattr(atoms, attrs[label]))
        except (AttributeError, ValueError):   # MDAnalysis's NoDataError: the topology has none
            return None

    return _table(int(atoms.n_atoms), get)


def _table(n: int, get) -> AtomTable:
    def text(label):
        v = get(label)
        return np.full(n, "", dtype=str) if v is None else np.asarray(v).astype(str)

    def ints(label, default):
        v = get(label)
        return default if v is None else np.asarray(v, np.int64)

    resindex = ints("resindex", np.zeros(n, np.int64))
    return AtomTable(text("name"), text("resname"), ints("resid", resindex + 1), resindex, text("segid"))


def backbone_quintuples(table: AtomTable, selected: np.ndarray, protein: np.ndarray,
                        c_name: str = "C", n_name: str = "N", ca_name: str = "CA") -> tuple[np.ndarray, np.ndarray]:
    """The φ/ψ atoms of the residues of ``selected`` (atom indices), as MDAnalysis's ``Ramachandran`` picks
    them: ``(5, R)`` atom indices (C of the residue before, N, CA, C, N of the residue after) and the ``R``
    residues' indices.

    As there: the residues must be within ``protein`` (else ValueError), the first and last protein
    residues are left out, neighbours are found by segment and number, and a residue is kept when it and
    its neighbours have exactly one of each atom named.
    """
    n_res = table.n_residues
    res_name, res_id, res_seg = table.residues()
    residues = sorted_unique(table.resindex[selected])
    prot = sorted_unique(table.resindex[protein]) if len(protein) else np.empty(0, np.int64)
    if not _within(residues, prot).all():
        raise ValueError("Found atoms outside of protein. Only atoms inside of a 'protein' selection can be used "
                         "to calculate dihedrals.")
    if len(prot):
        residues = residues[(residues != prot[0]) & (residues != prot[-1])]
    prev = _neighbours(residues, res_id, res_seg, -1, n_res)
    nxt = _neighbours(residues, res_id, res_seg, +1, n_res)
    keep = (prev >= 0) & (nxt >= 0)
    residues, prev, nxt = residues[keep], prev[keep], nxt[keep]
    (c_n, c_at), (n_n, n_at), (ca_n, ca_at) = _named(table, c_name), _named(table, n_name), _named(table, ca_name)
    keep = (c_n[prev] == 1) & (n_n[residues] == 1) & (ca_n[residues] == 1) & (c_n[residues] == 1) & (n_n[nxt] == 1)
    residues, prev, nxt = residues[keep], prev[keep], nxt[keep]
    quint = np.stack([c_at[prev], n_at[residues], ca_at[residues], c_at[residues], n_at[nxt]]).astype(np.int64)
    return quint, residues


def _named(table: AtomTable, *names: str) -> tuple[np.ndarray, np.ndarray]:
    """Per residue: how many atoms have one of ``names``, and one such atom's index."""
    hit = np.zeros(len(table.name), bool)
    for n in names:
        hit |= table.name == n
    hit = np.flatnonzero(hit)
    n_res = table.n_residues
    count = np.bincount(table.resindex[hit], minlength=n_res)
    atom = np.full(n_res, -1, np.int64)
    atom[table.resindex[hit]] = hit
    return count, atom


#: χ1's fourth atom, by name (MDAnalysis's ``chi1_selection`` default ``cg_name``).
CHI1_GAMMA = ("CG", "CG1", "OG", "OG1", "SG")


def side_quadruples(table: AtomTable, quint: np.ndarray, omega: bool, chi1: bool) -> tuple[np.ndarray, np.ndarray,
                                                                                             np.ndarray]:
    """The ω and χ1 atoms of the residues of ``quint`` (from :func:`backbone_quintuples`) that have them:
    ``(quads (4, M), place (M,), kind (M,))``: each angle's four atoms, its residue's place in ``quint``
    and ``"omega"`` or ``"chi1"``, in residue order (ω before χ1 in a residue).

    ω as MDAnalysis's ``omega_selection``: CA and C of the residue, N and CA of the next (which needs
    exactly one CA); χ1 as its ``chi1_selection``: exactly one each of N, CA, CB and one atom named
    CG, CG1, OG, OG1 or SG (glycine and alanine have none)."""
    residues = table.resindex[quint[1]]
    nxt = table.resindex[quint[4]]
    quads, places, kinds = [], [], []
    if omega:
        ca_n, ca_at = _named(table, "CA")
        k = np.flatnonzero(ca_n[nxt] == 1)
        quads.append(np.stack([quint[2, k], quint[3, k], quint[4, k], ca_at[nxt[k]]]))
        places.append(k)
        kinds.append(np.full(len(k), "omega"))
    if chi1:
        (n_n, n_at), (ca_n, ca_at), (cb_n, cb_at), (g_n, g_at) = (_named(table, "N"), _named(table, "CA"),
                                                                    _named(table, "CB"), _named(table, *CHI1_GAMMA))
        r = residues
        k = np.flatnonzero((n_n[r] == 1) & (ca_n[r] == 1) & (cb_n[r] == 1) & (g_n[r] == 1))
        quads.append(np.stack([n_at[r[k]], ca_at[r[k]], cb_at[r[k]], g_at[r[k]]]))
        places.append(k)
        kinds.append(np.full(len(k), "chi1"))
    if not quads:
        return np.empty((4, 0), np.int64), np.empty(0, np.int64), np.empty(0, dtype=str)
    quads, places, kinds = np.concatenate(quads, axis=1), np.concatenate(places), np.concatenate(kinds)
    order = np.argsort(places, kind="stable")   # residue order; ω before χ1 within one (stable)
    return quads[:, order].astype(np.int64), places[order], kinds[order]


def _within(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is in ``sorted_set`` (sorted, distinct): ``np.isin`` without its first
    call's import of ``numpy.ma``."""
    if not len(sorted_set):
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


def _neighbours(residues: np.ndarray, res_id: np.ndarray, res_seg: np.ndarray, step: int, n_res: int) -> np.ndarray:
    """For each residue, the residue of the same segment numbered ``resid + step``: the adjacent residue
    index when it is that one, else the lowest such residue index; -1 where there is none (MDAnalysis's
    ``_get_prev_residues_by_resid``/``_get_next_residues_by_resid``)."""
    if not len(residues):
        return np.empty(0, np.int64)
    want_id, want_seg = res_id[residues] + step, res_seg[residues]
    # (as MDAnalysis indexes ``ix - 1``, the first residue's neighbour before is tried as the last; the last
    # residue of the topology has none after, and is not searched for)
    adjacent = (residues + step) % n_res
    out = np.where((res_id[adjacent] == want_id) & (res_seg[adjacent] == want_seg), adjacent, -1)
    searched = out < 0
    if step > 0:
        searched &= residues + step < n_res
    missing = np.flatnonzero(searched)
    if len(missing):
        # The first residue with each (segment, number): one sort of every residue, then a search.
        keys = np.char.add(np.char.add(res_seg.astype(str), "\x1f"), res_id.astype(str))
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        want = np.char.add(np.char.add(want_seg[missing].astype(str), "\x1f"), want_id[missing].astype(str))
        at = np.searchsorted(sorted_keys, want)
        found = (at < len(sorted_keys)) & (sorted_keys[np.minimum(at, len(sorted_keys) - 1)] == want)
        out[missing] = np.where(found, order[np.minimum(at, len(order) - 1)], -1)
    return out


def narrowed(text: np.ndarray) -> np.ndarray:
    """``text`` as strings as wide as its longest (a number's ``astype(str)`` is 21 characters wide, and
    joining labels costs their width)."""
    return text.astype(f"<U{max(1, int(np.strings.str_len(text).max(initial=0)))}")


def atom_words(table: AtomTable, atoms: np.ndarray, with_chain: bool) -> np.ndarray:
    """``"CA 12"`` (atom name and residue number; ``"CA 12 A"`` with its chain) for each of ``atoms``."""
    words = np.strings.add(np.strings.add(table.name[atoms], " "), table.resid[atoms].astype(str))
    if with_chain:
        words = np.strings.add(np.strings.add(words, " "), table.segid[atoms])
    return narrowed(words)


__all__ = ["CHI1_GAMMA", "AtomTable", "atom_table", "atom_words", "backbone_quintuples", "derived", "narrowed",
           "side_quadruples", "topology_of"]
