"""A stand-in for a topology's MDAnalysis Universe that answers selections from the selection cache.

Selections seen before, their ``indices``, ``n_atoms`` and ``masses``, come from :mod:`.selection_cache`, so
such a run never imports MDAnalysis; anything else builds the real Universe, and the cacheable selections it
evaluates are recorded for the next run. A PDB or GRO file not yet cached is first read from its columns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..util import check_input_file
from . import parsed_cache, selection_cache
from .standin import StandInAtomGroup, StandInUniverse

# (.columns and .labelled read a topology's text, for a selection not cached yet: imported when one is)

log = logging.getLogger(__name__)

#: Entry key of the whole topology (``universe.atoms``): its masses only, indices are 0..n-1.
_ALL = "\x00all"


class CachedUniverse(StandInUniverse):
    """The topology's Universe as ``prepare`` sees it; MDAnalysis builds the real one only when needed.

    Parameters
    ----------
    topology
        The topology file.
    build
        Builds the real Universe (the topology with the trajectory's first frame).
    kw
        The keyword arguments the Universe is built with (part of the cache key).
    """

    def __init__(self, topology: str, build: Callable[[], object], kw: dict | None = None) -> None:
        check_input_file(topology)   # the same one-line error as building the Universe
        super().__init__(topology, build)
        self._kw = dict(kw or {})
        key = selection_cache.entry_key(topology, kw or {}) if parsed_cache.caches_enabled() else None
        self._entry = selection_cache.load(key) if key is not None else None
        # the entry's arrays decoded once: an ensemble's members sharing this topology ask the same selections
        self._arrays: dict[tuple[str, str], np.ndarray | None] = {}
        self._labels: dict[str, np.ndarray] | None | bool = False   # (False: not read yet)
        self._guessed: np.ndarray | None | bool = False
        if self._entry is not None and self._entry["n_atoms"] is None and self.read_labels() is not None:
            self._entry["n_atoms"] = len(self.read_labels()["name"])

    def read_labels(self) -> dict[str, np.ndarray] | None:
        """The file's per-atom labels from its text (a PDB or GRO read as MDAnalysis reads it), else None; read once."""
        if self._labels is False:   # (keyword arguments, such as another format, are MDAnalysis's to apply)
            from .columns import file_labels

            self._labels = file_labels(self.filename) if self._real is None and not self._kw else None
        return self._labels

    def label_masses(self) -> np.ndarray | None:
        """Every atom's mass as MDAnalysis guesses it, from the labels (None without them, or once built)."""
        labels = self.read_labels() if self._real is None else None
        if labels is None:
            return None
        if self._guessed is False:
            from .columns import guessed_masses

            self._guessed = guessed_masses(labels)
        return self._guessed

    def _built(self, real) -> None:
        if self._entry is not None:
            self._entry["n_atoms"] = int(real.atoms.n_atoms)

    @property
    def atoms(self):
        n = self._entry["n_atoms"] if self._entry is not None else None
        if n is None:
            return self.real.atoms
        return CachedAtomGroup(self, np.arange(n), self._array(_ALL, "masses"), _ALL)

    def select_atoms(self, *strings, **kw):
        """``Universe.select_atoms``: from the cache when this selection was recorded, else MDAnalysis's."""
        plain = bool(strings) and not kw and all(isinstance(s, str) for s in strings)
        if self._entry is None or not plain or not selection_cache.cacheable(strings):
            return self.real.select_atoms(*strings, **kw)
        key = selection_cache.selection_key(strings)
        rec = self._entry["selections"].get(key)
        if rec is not None and self._entry["n_atoms"] is not None:
            indices = self._array(key, "indices")
            if indices is not None:
                return CachedAtomGroup(self, indices, self._array(key, "masses"), key)
        labels = self.read_labels() if self._real is None and len(strings) == 1 else None
        indices = None
        if labels is not None:
            from .labelled import select_from_labels

            indices = select_from_labels(labels, strings[0])
        if indices is not None:
            masses = self.label_masses()
            masses = None if masses is None else masses[indices]
            self.record(key, indices, masses)
            return CachedAtomGroup(self, indices, masses, key)
        group = self.real.select_atoms(*strings)
        self.record(key, group.indices, _masses(group))
        return group

    def record(self, key: str, indices: np.ndarray | None, masses: np.ndarray | None) -> None:
        """Keep a selection's indices (None for the whole topology) and masses for the next run."""
        if self._entry is None:
            return
        if self._entry["n_atoms"] is None:
            self.real   # noqa: B018 - sets the entry's atom count
        rec = {} if indices is None else {"indices": selection_cache.encode(np.asarray(indices, np.int64))}
        if masses is not None:
            rec["masses"] = selection_cache.encode(masses)
        self._entry["selections"][key] = rec
        self._arrays.pop((key, "indices"), None)
        self._arrays.pop((key, "masses"), None)
        selection_cache.store(self._entry)

    def _array(self, key: str, field: str) -> np.ndarray | None:
        """Selection ``key``'s stored ``field`` (a copy), or None when it is missing or damaged."""
        if (key, field) not in self._arrays:
            rec = self._entry["selections"].get(key) or {}
            self._arrays[key, field] = _decoded(rec.get(field))
        a = self._arrays[key, field]
        return None if a is None else a.copy()

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("_entry", "_real", "_build", "_arrays", "_labels", "_guessed", "_kw"):
            raise AttributeError(name)
        return getattr(self.real, name)

    def __repr__(self) -> str:
        return f"<CachedUniverse of {self.filename} ({'built' if self._real is not None else 'not built'})>"


class CachedAtomGroup(StandInAtomGroup):
    """A selection from the cache: ``indices``, ``n_atoms``, ``masses``; anything else is the real AtomGroup's."""

    def __init__(self, universe: CachedUniverse, indices: np.ndarray, masses: np.ndarray | None, key: str) -> None:
        super().__init__(universe, indices)
        self._masses = masses
        self._key = key

    @property
    def masses(self) -> np.ndarray:
        if self._masses is None and self.universe.label_masses() is not None:   # (a PDB's, guessed as MDAnalysis)
            self._masses = self.universe.label_masses()[self.indices]
            self.universe.record(self._key, None if self._key == _ALL else self.indices, self._masses)
        if self._masses is None:   # not recorded yet: MDAnalysis's (which raises if the topology has none)
            masses = self._real.masses
            self._masses = np.asarray(masses, np.float64)
            self.universe.record(self._key, None if self._key == _ALL else self.indices, self._masses)
            return masses
        return self._masses.copy()

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("universe", "indices", "_masses", "_key"):
            raise AttributeError(name)
        return getattr(self._real, name)

    def __repr__(self) -> str:
        return f"<CachedAtomGroup with {self.n_atoms} atoms (selection cache)>"


def _decoded(value) -> np.ndarray | None:
    """A stored array, or None when it is missing or damaged (then MDAnalysis answers)."""
    if value is None:
        return None
    try:
        return selection_cache.decode(value)
    except (KeyError, TypeError, ValueError) as exc:
        log.debug("ignoring a damaged selection cache record: %s", exc)
        return None


def _masses(group) -> np.ndarray | None:
    """The group's masses as float64, or None if the topology has none."""
    try:
        return np.asarray(group.masses, np.float64)
    except Exception:   # noqa: BLE001 - MDAnalysis's NoDataError: no masses to cache
        return None
