"""Per-atom labels of a trajectory's atoms: name, resname, resid, segid, element, mass where known.

From a topology file, or, without one, from the atoms an H5MD file stores beside its frames
(:meth:`~trajscale.sources.base.Source.stored_atom_labels`).
"""

from __future__ import annotations

import numpy as np

from ..errors import AtomCountMismatchError

#: The per-atom coordinates a Dataset may have (those its topology has).
LABELS = ("name", "resname", "resid", "segid", "element", "mass")


def topology_labels(topology: str, n_atoms: int, trajectory: str) -> dict[str, np.ndarray]:
    """The topology file's labels, one value per atom (cached per file version); refused if its atom count differs."""
    from ..topology import atom_labels

    n_top, labels = atom_labels(str(topology))
    if n_top != n_atoms:
        raise AtomCountMismatchError(f"{topology} has {n_top} atoms but {trajectory} has {n_atoms}")
    return {k: v for k, v in labels.items() if k in LABELS}


def selected_atoms(topology: str, config: dict, selection: str) -> np.ndarray:
    """Indices of the atoms ``selection`` picks, sorted (cached, else from the Universe with the first frame)."""
    from ..topology import CachedUniverse, select_atoms

    universe = CachedUniverse(topology, lambda: _first_frame_universe(topology, config))
    return np.unique(np.asarray(select_atoms(universe, selection).indices, dtype=np.int64))


def _first_frame_universe(topology: str, config: dict):
    from ..planning import topology_with_first_frame
    from ..sources import source_from_config

    with source_from_config(config) as source:   # its own: the Universe keeps the frame it reads
        return topology_with_first_frame(topology, source)
