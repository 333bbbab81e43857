"""What the atoms are: a topology loaded from any format, its selections, and the caches that skip both.

The rest of trajscale enters this package through the names below and nowhere else. Each is imported on first
use (:mod:`trajscale._lazy`), so a module that needs :func:`select_atoms` alone imports no cache into every
worker; MDAnalysis and h5py only inside the functions that need them.
"""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .columns import file_labels, pdb_labels, record_columns, residue_starts, wrapped_resids
    from .h5md import atom_arrays
    from .labelled import LabelledTopology
    from .labels import atom_labels, written_atoms
    from .load import load_universe, trajectory_only_format
    from .parsed_cache import caches_enabled
    from .select import NAMED_TOPOLOGIES, select_atoms
    from .universe import CachedUniverse

__getattr__, __dir__ = attach(__name__, {
    "load_universe": ".load", "trajectory_only_format": ".load",
    "CachedUniverse": ".universe", "atom_arrays": ".h5md", "atom_labels": ".labels", "select_atoms": ".select",
    "NAMED_TOPOLOGIES": ".select", "LabelledTopology": ".labelled", "pdb_labels": ".columns",
    "file_labels": ".columns", "record_columns": ".columns", "residue_starts": ".columns",
    "wrapped_resids": ".columns", "written_atoms": ".labels", "caches_enabled": ".parsed_cache",
})

__all__ = ["NAMED_TOPOLOGIES", "CachedUniverse", "LabelledTopology", "atom_arrays", "atom_labels", "caches_enabled",
           "file_labels", "load_universe", "pdb_labels", "record_columns", "residue_starts", "select_atoms",
           "trajectory_only_format", "wrapped_resids", "written_atoms"]
