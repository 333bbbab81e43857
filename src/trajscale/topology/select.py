"""Atom selections on a topology, with empty or invalid selections as clear errors."""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence

from ..errors import SelectionError, TrajscaleError

#: Topology formats that carry atom names (and residues), for the message when one is missing.
NAMED_TOPOLOGIES = "TPR, PSF, GRO, PDB, PQR, MOL2, PRMTOP, CRD"


def select_atoms(atoms, selection: str | Sequence[str], what: str = "selection"):
    """``atoms.select_atoms`` with empty or invalid selections as clear errors; several strings joined in order."""
    strings = (selection,) if isinstance(selection, str) else tuple(selection)
    shown = repr(selection if isinstance(selection, str) else list(strings))
    if not any(s.strip() for s in strings):   # (said here, not by MDAnalysis's warning on the first call only)
        raise SelectionError(f"{what} {shown} is empty: it selects no atoms")
    try:
        with warnings.catch_warnings(record=True) as said:   # (MDAnalysis's words go into the refusal's one line)
            warnings.simplefilter("always")
            group = atoms.select_atoms(*strings)
    except TrajscaleError:   # the topology itself failed to load (a Universe built on first use)
        raise
    except Exception as exc:   # noqa: BLE001 - MDAnalysis raises SelectionError, ValueError, KeyError...
        missing = re.search(r"has no attribute '(\w+)'", str(exc))
        if missing:   # e.g. an XTC given as the topology: MDAnalysis's minimal topology has no names
            u = getattr(atoms, "universe", atoms)
            top = getattr(u, "filename", None) or "the topology"
            raise SelectionError(
                f"{what} {shown} needs atom {missing.group(1)}, but {top} has none (a trajectory-only "
                f"file, such as XTC, TRR, DCD or NetCDF, has no atom names); give a topology file that has "
                f"them: {NAMED_TOPOLOGIES}") from None
        raise SelectionError(f"invalid {what} {shown}: {exc}") from None
    if group.n_atoms == 0:
        raise SelectionError(f"{what} {shown} selects no atoms" + "".join(f" (MDAnalysis: {w.message})" for w in said))
    for w in said:
        warnings.warn(w.message, stacklevel=2)
    return group
