"""What the atoms are: a topology loaded from any format, its selections, and the caches that skip both.

This package is entered through the names below and nowhere else:

* :func:`load_universe` - a topology file (any format MDAnalysis parses, or an
  H5MD file that stores its atoms) as an MDAnalysis Universe, parsed once per
  file version (:mod:`.parsed_cache`);
* :class:`CachedUniverse` - the Universe as an analysis's ``prepare`` sees it,
  answering selections it has seen before from :mod:`.selection_cache`
  without importing MDAnalysis;
* :func:`select_atoms` - a selection, with empty or invalid ones as clear errors;
* :func:`trajectory_only_format` - whether a file holds frames but no atom names.

Its modules import MDAnalysis (and h5py) only inside the functions that need them, so importing
the package costs the standard library and NumPy.
"""

from __future__ import annotations

from .load import TRAJECTORY_ONLY_FORMATS, load_universe, trajectory_only_format
from .select import NAMED_TOPOLOGIES, select_atoms
from .universe import CachedUniverse

__all__ = ["NAMED_TOPOLOGIES", "TRAJECTORY_ONLY_FORMATS", "CachedUniverse", "load_universe", "select_atoms",
           "trajectory_only_format"]
