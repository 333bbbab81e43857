"""A stand-in for an MDAnalysis Universe and its AtomGroups: what ``prepare`` asks most, answered without
MDAnalysis; anything else is the real Universe's, built on first use by the callable its owner gives.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import numpy as np


class StandInUniverse:
    """The real Universe built once, when first asked for (:attr:`real`), its cost kept in :attr:`t_build`."""

    def __init__(self, filename: str, build: Callable[[], object]) -> None:
        self.filename = filename
        self._build = build
        self._real = None
        #: Seconds spent building the real Universe (0 when every answer came without it).
        self.t_build = 0.0

    @property
    def universe(self) -> StandInUniverse:
        return self

    @property
    def built(self) -> bool:
        """Whether the real Universe was built."""
        return self._real is not None

    @property
    def real(self):
        """The MDAnalysis Universe (built, and MDAnalysis imported, on first use)."""
        if self._real is None:
            t0 = time.perf_counter()
            self._real = self._build()
            self.t_build += time.perf_counter() - t0
            self._built(self._real)
        return self._real

    def _built(self, real) -> None:
        """Told the real Universe once it is built (nothing to do by default)."""


class StandInAtomGroup:
    """A selection as ``indices`` and ``n_atoms``; any other attribute is the real AtomGroup's (built then)."""

    def __init__(self, universe: StandInUniverse, indices: np.ndarray) -> None:
        self.universe = universe
        self.indices = indices

    @property
    def n_atoms(self) -> int:
        return len(self.indices)

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def atoms(self) -> StandInAtomGroup:
        return self

    @functools.cached_property
    def _real(self):
        return self.universe.real.atoms[self.indices]

    def __getitem__(self, item):
        return self._real[item]

    def __iter__(self):
        return iter(self._real)


__all__ = ["StandInAtomGroup", "StandInUniverse"]
