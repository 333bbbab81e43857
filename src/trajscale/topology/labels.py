"""A topology's per-atom labels, read once per topology file version and kept in the selection cache.

The labels have an entry of their own beside the selections: they are several times their size, and a run
that names no feature reads no labels.
"""

from __future__ import annotations

import logging

import numpy as np

from . import parsed_cache, selection_cache

log = logging.getLogger(__name__)

#: Label -> MDAnalysis AtomGroup attribute.
LABELS = {"name": "names", "resname": "resnames", "resid": "resids", "resindex": "resindices", "segid": "segids",
          "element": "elements", "mass": "masses"}
#: What a writer stores beside them (:func:`written_labels`): label -> MDAnalysis AtomGroup attribute.
WRITTEN = {"id": "ids", "charge": "charges", "type": "types"}
TEXT = ("name", "resname", "segid", "element", "type")
_ENTRY_KEY, _WRITTEN_KEY = "labels", "written"
#: The records' layout: a record of another is read again from the topology.
_VERSION = 3


def atom_labels(topology: str, atoms=None) -> tuple[int, dict[str, np.ndarray]]:
    """The topology's atom count and labels, one value per atom; ``atoms``: a built Universe's atoms, read instead."""
    return _kept(str(topology), _ENTRY_KEY, LABELS, atoms)


def written_labels(topology: str, atoms=None) -> tuple[int, dict[str, np.ndarray]] | None:
    """What a writer stores of the atoms beyond their labels (:data:`WRITTEN`); without ``atoms``, only the cache's."""
    return _kept(str(topology), _WRITTEN_KEY, WRITTEN, atoms, parse=False)


def _kept(topology: str, part: str, attrs: dict[str, str], atoms, parse: bool = True):
    key = selection_cache.entry_key(topology, {}, part=part) if parsed_cache.caches_enabled() else None
    entry = selection_cache.load(key) if key is not None else None
    kept = entry.get(part) if entry is not None else None
    # (a record of an earlier version lacks a label added since: read again)
    if isinstance(kept, dict) and kept.get("version") == _VERSION:
        try:
            n_atoms, labels = int(kept["n_atoms"]), {k: _decoded(k, v) for k, v in kept["values"].items() if k in attrs}
            if any(v.shape != (n_atoms,) for v in labels.values()):
                raise ValueError("a label's length is not the atom count")
            return n_atoms, labels
        except (KeyError, TypeError, ValueError) as exc:   # a damaged record: read the topology again
            log.debug("ignoring the %s cached for %s: %s", part, topology, exc)
    if atoms is None and not parse:
        return None
    # (a PDB's or GRO's labels from its columns, as MDAnalysis reads them; what a writer adds needs the Universe)
    read = _from_columns(topology) if atoms is None and attrs is LABELS else None
    if read is None and atoms is None:
        from .load import load_universe

        atoms = load_universe(topology, topology_coordinates=False).atoms
    n_atoms, labels = read if read is not None else _labels_of(atoms, attrs)
    if entry is not None:
        entry[part] = {"version": _VERSION, "n_atoms": n_atoms,
                       "values": {k: _encoded(k, v) for k, v in labels.items()}}
        selection_cache.store(entry)
    return n_atoms, labels


def written_atoms(topology: str, select, topology_coordinates: bool) -> tuple[np.ndarray | None, object, int]:
    """What a writer stores of a topology file's atoms: the indices ``select`` picks (None: every atom), those
    atoms (an AtomGroup, or :class:`CachedAtoms` with the same arrays), and the topology's atom count.

    From the cache nothing is parsed and MDAnalysis is not imported; otherwise the Universe is built (with the
    file's own coordinates if ``topology_coordinates``) and what it has is kept for the next writer."""
    from .load import load_universe
    from .select import select_atoms
    from .universe import CachedUniverse

    universe = CachedUniverse(topology, lambda: load_universe(topology, topology_coordinates=topology_coordinates))
    indices = select_atoms(universe, select, "selection").indices if select else None
    labels = None if universe.built else _kept(topology, _ENTRY_KEY, LABELS, None, parse=False)
    written = None if labels is None else _kept(topology, _WRITTEN_KEY, WRITTEN, None, parse=False)
    if written is None or written[0] != labels[0]:
        atoms = universe.real.atoms
        atom_labels(topology, atoms=atoms)
        written_labels(topology, atoms=atoms)
        return indices, atoms if indices is None else atoms[indices], int(atoms.n_atoms)
    every = CachedAtoms({**labels[1], **written[1]}, np.arange(labels[0]))
    return indices, every if indices is None else every[indices], labels[0]


class CachedAtoms:
    """Atoms whose arrays came from the cache, by AtomGroup names; a missing one raises AttributeError."""

    _LABEL_OF = {attr: label for label, attr in {**LABELS, **WRITTEN}.items()}

    def __init__(self, labels: dict[str, np.ndarray], indices: np.ndarray) -> None:
        self._labels = labels
        self.indices = np.asarray(indices, np.int64)

    @property
    def atoms(self) -> CachedAtoms:
        return self

    @property
    def n_atoms(self) -> int:
        return len(self.indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, picked) -> CachedAtoms:
        return CachedAtoms(self._labels, self.indices[picked])

    def __getattr__(self, name: str):
        label = CachedAtoms._LABEL_OF.get(name)
        if name.startswith("_") or label not in self._labels:
            raise AttributeError(name)
        values = self._labels[label][self.indices]
        return values.astype(object) if label in TEXT else values   # (text as MDAnalysis gives it: str objects)


def _from_columns(topology: str) -> tuple[int, dict[str, np.ndarray]] | None:
    """The labels of a PDB or GRO file read from its columns (:mod:`.columns`), or None: MDAnalysis must read it."""
    from .columns import file_labels, guessed_masses, read_elements

    read = file_labels(topology)
    masses = guessed_masses(read) if read is not None else None
    if masses is None:
        return None
    labels = {k: read[k] for k in ("name", "resname", "resid", "resindex", "segid")}
    elements = read_elements(read)
    if elements is not None:
        labels["element"] = elements
    labels["mass"] = masses
    return len(masses), labels


def _labels_of(atoms, attrs: dict[str, str]) -> tuple[int, dict[str, np.ndarray]]:
    out = {}
    for label, attr in attrs.items():
        try:
            values = np.asarray(getattr(atoms, attr))
        except (AttributeError, ValueError):   # MDAnalysis's NoDataError: the topology has none
            continue
        out[label] = values.astype(str) if label in TEXT else values
    return int(atoms.n_atoms), out


def _encoded(label: str, values: np.ndarray):
    if label not in TEXT:
        return selection_cache.encode(values, compress=True)
    # (a text label as its distinct values and each atom's code: 50,000 atoms have a few hundred names)
    distinct, codes = np.unique(values, return_inverse=True)
    return {"distinct": distinct.tolist(), "codes": selection_cache.encode(codes.astype(np.int32), compress=True)}


def _decoded(label: str, value) -> np.ndarray:
    if label not in TEXT:
        return selection_cache.decode(value)
    if not isinstance(value, dict) or not isinstance(value.get("distinct"), list):
        raise ValueError(f"{label} is not a list of names")   # a damaged record
    distinct = np.array(value["distinct"], dtype=str)
    codes = selection_cache.decode(value["codes"])
    if distinct.ndim != 1 or codes.ndim != 1 or (codes.size and (codes.min() < 0 or codes.max() >= distinct.size)):
        raise ValueError(f"{label}'s codes are not those of its names")
    return distinct[codes]
