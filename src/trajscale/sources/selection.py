"""Atom selections on a topology, with empty or invalid selections as clear errors."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import SelectionError


def select_atoms(atoms, selection: str | Sequence[str], what: str = "selection"):
    """``atoms.select_atoms`` with empty or invalid selections as clear errors.

    ``atoms`` is a Universe or an AtomGroup (which selects among its own atoms);
    several strings are joined in order, as ``select_atoms(sel, *othersel)`` does.
    """
    strings = (selection,) if isinstance(selection, str) else tuple(selection)
    shown = repr(selection if isinstance(selection, str) else list(strings))
    try:
        group = atoms.select_atoms(*strings)
    except Exception as exc:   # MDAnalysis raises SelectionError, ValueError, KeyError...
        raise SelectionError(f"invalid {what} {shown}: {exc}") from None
    if group.n_atoms == 0:
        raise SelectionError(f"{what} {shown} selects no atoms")
    return group
