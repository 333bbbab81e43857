"""Atom selections on a topology, with empty or invalid selections as clear errors."""

from __future__ import annotations

import re

from ..errors import SelectionError

#: Topology formats that carry atom names (and residues), for the message when one is missing.
NAMED_TOPOLOGIES = "TPR, PSF, GRO, PDB, PQR, MOL2, PRMTOP, CRD"


def select_atoms(universe, selection: str, what: str = "selection"):
    """``universe.select_atoms`` with empty or invalid selections as clear errors."""
    try:
        group = universe.select_atoms(selection)
    except Exception as exc:   # MDAnalysis raises SelectionError, ValueError, KeyError...
        missing = re.search(r"has no attribute '(\w+)'", str(exc))
        if missing:   # e.g. an XTC given as the topology: MDAnalysis's minimal topology has no names
            top = getattr(universe, "filename", None) or "the topology"
            raise SelectionError(
                f"{what} {selection!r} needs atom {missing.group(1)}, but {top} has none (a trajectory-only "
                f"file, such as XTC, TRR, DCD or NetCDF, has no atom names); give a topology file that has "
                f"them: {NAMED_TOPOLOGIES}") from None
        raise SelectionError(f"invalid {what} {selection!r}: {exc}") from None
    if group.n_atoms == 0:
        raise SelectionError(f"{what} {selection!r} selects no atoms")
    return group
