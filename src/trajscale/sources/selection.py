"""Atom selections on a topology, with empty or invalid selections as clear errors."""

from __future__ import annotations

from ..errors import SelectionError


def select_atoms(universe, selection: str, what: str = "selection"):
    """``universe.select_atoms`` with empty or invalid selections as clear errors."""
    try:
        group = universe.select_atoms(selection)
    except Exception as exc:   # MDAnalysis raises SelectionError, ValueError, KeyError...
        raise SelectionError(f"invalid {what} {selection!r}: {exc}") from None
    if group.n_atoms == 0:
        raise SelectionError(f"{what} {selection!r} selects no atoms")
    return group
