"""A topology's per-atom labels (name, resname, resid, residue index, segid, element, mass), kept in the
selection cache.

What an array of a trajectory labels its atoms with is read once per topology file version (a PDB's or
GRO's from its columns where they read as MDAnalysis reads them, :mod:`.columns`; else by MDAnalysis): the
next open of the same file (same path, inode, size, modification time and MDAnalysis version, the
selection cache's key) reads them from that cache's JSON entry and never imports MDAnalysis. The labels
have an entry of their own beside the file's selections: they are several times the size of the
selections (every atom's names as text), and a run that names no feature reads only the selections.
"""

from __future__ import annotations

import logging

import numpy as np

from . import parsed_cache, selection_cache

log = logging.getLogger(__name__)

#: Label -> MDAnalysis AtomGroup attribute.
LABELS = {"name": "names", "resname": "resnames", "resid": "resids", "resindex": "resindices", "segid": "segids",
          "element": "elements", "mass": "masses"}
TEXT = ("name", "resname", "segid", "element")
_ENTRY_KEY = "labels"


def atom_labels(topology: str, atoms=None) -> tuple[int, dict[str, np.ndarray]]:
    """The topology's atom count and the labels it has (text as ``str`` arrays), one value per atom.

    ``atoms``: the file's atoms where a Universe of it was built already (read instead of parsing the
    file again), so that the next run finds them in the cache."""
    key = selection_cache.entry_key(str(topology), {}, part=_ENTRY_KEY) if parsed_cache.enabled() else None
    entry = selection_cache.load(key) if key is not None else None
    kept = entry.get(_ENTRY_KEY) if entry is not None else None
    if isinstance(kept, dict) and "resindex" in (kept.get("values") or {}):   # (one without it predates that label)
        try:
            return int(kept["n_atoms"]), {k: _decoded(k, v) for k, v in kept["values"].items() if k in LABELS}
        except (KeyError, TypeError, ValueError) as exc:   # a damaged record: read the topology again
            log.debug("ignoring the labels cached for %s: %s", topology, exc)
    read = _from_columns(str(topology)) if atoms is None else None
    n_atoms, labels = read if read is not None else _labels_of(_parsed_atoms(str(topology)) if atoms is None
                                                               else atoms)
    if entry is not None:
        entry[_ENTRY_KEY] = {"n_atoms": n_atoms, "values": {k: _encoded(k, v) for k, v in labels.items()}}
        selection_cache.store(entry)
    return n_atoms, labels


def _from_columns(topology: str) -> tuple[int, dict[str, np.ndarray]] | None:
    """The labels of a PDB or GRO file read from its columns, as MDAnalysis's parser and guesser give them
    (:mod:`.columns`), or None where MDAnalysis must read it."""
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


def _parsed_atoms(topology: str):
    from .load import load_universe

    return load_universe(topology, topology_coordinates=False).atoms


def _labels_of(atoms) -> tuple[int, dict[str, np.ndarray]]:
    out = {}
    for label, attr in LABELS.items():
        try:
            values = np.asarray(getattr(atoms, attr))
        except (AttributeError, ValueError):   # MDAnalysis's NoDataError: the topology has none
            continue
        out[label] = values.astype(str) if label in TEXT else values
    return int(atoms.n_atoms), out


def _encoded(label: str, values: np.ndarray):
    return values.tolist() if label in TEXT else selection_cache.encode(values)


def _decoded(label: str, value) -> np.ndarray:
    if label in TEXT:
        names = np.array(value if isinstance(value, list) else None)
        if names.dtype.kind != "U" or names.ndim != 1:   # anything but a list of names: a damaged record
            raise ValueError(f"{label} is not a list of names")
        return names
    return selection_cache.decode(value)
