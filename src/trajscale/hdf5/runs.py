"""Which atoms of each frame a read moves: whole frames, one span, or separate runs.

A selection such as "protein CA plus one ion at the end" is scattered: its span moves almost the whole frame,
each run of nearby atoms read alone only what is needed. The reader and ``inspect`` both decide with
:func:`plan_atom_reads`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..block import sorted_unique
from ..util import LRU

#: Atoms between two selected ones read rather than cut (cheaper than one more request per frame).
MERGE_GAP_ATOMS = 256
#: Whole frames are read once the atoms to move pass this fraction of a frame.
SPAN_FRACTION = 0.75
#: Plans kept for the next read of the same atoms (an ensemble's members ask the same), of at most so many atoms.
KEPT_PLANS, KEPT_ATOMS = 64, 65_536
_PLANS = LRU(KEPT_PLANS)


@dataclass(frozen=True)
class AtomReads:
    """The atom runs a read moves per frame and where the requested atoms land.

    Attributes
    ----------
    runs
        ``(R, 2)`` int64 half-open atom ranges, increasing; read side by side into ``n_columns`` atoms per frame.
    index
        Column of each requested atom in that buffer; None when it holds exactly the requested atoms in order.
    """

    runs: np.ndarray
    index: np.ndarray | None

    @property
    def n_columns(self) -> int:
        """Atoms per frame in the read buffer."""
        return int((self.runs[:, 1] - self.runs[:, 0]).sum())

    def bytes_per_frame(self, itemsize: int = 4) -> int:
        """Bytes one frame of one xyz field allocates: the buffer plus the indexed copy."""
        n_out = 0 if self.index is None else len(self.index)
        return (self.n_columns + n_out) * 3 * itemsize


def _cost(runs: np.ndarray) -> int:
    """Atoms moved per frame, plus MERGE_GAP_ATOMS per extra request."""
    return int((runs[:, 1] - runs[:, 0]).sum()) + MERGE_GAP_ATOMS * (len(runs) - 1)


def plan_atom_reads(atoms: np.ndarray | None, n_atoms: int) -> AtomReads:
    """How to read ``atoms`` (global indices, any order) of ``n_atoms``-atom frames.

    Runs closer than :data:`MERGE_GAP_ATOMS` are merged; runs are kept when cheaper than the span, the span
    below :data:`SPAN_FRACTION` of a frame, else whole frames. Small plans are kept (read-only) and reused."""
    if atoms is None:
        return AtomReads(np.array([[0, n_atoms]], dtype=np.int64), None)
    atoms = np.asarray(atoms, dtype=np.int64)
    if atoms.size == 0:
        return AtomReads(np.zeros((0, 2), np.int64), atoms)
    if atoms.size > KEPT_ATOMS:
        return _plan(atoms, n_atoms)
    key = (n_atoms, atoms.shape, atoms.tobytes())
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    plan = _plan(atoms, n_atoms)
    for a in (plan.runs, plan.index):   # (shared by every read that asks for these atoms)
        if a is not None:
            a.setflags(write=False)
    _PLANS.put(key, plan)
    return plan


def _plan(atoms: np.ndarray, n_atoms: int) -> AtomReads:
    """:func:`plan_atom_reads` of a non-empty int64 ``atoms``, made."""
    whole = np.array([[0, n_atoms]], dtype=np.int64)
    u = sorted_unique(atoms)
    cut = np.flatnonzero(np.diff(u) > MERGE_GAP_ATOMS + 1)
    runs = np.stack([u[np.concatenate(([0], cut + 1))], u[np.concatenate((cut, [-1]))] + 1], axis=1)
    span = np.array([[u[0], u[-1] + 1]], dtype=np.int64)
    if _cost(span) <= _cost(runs):
        runs = span
    if _cost(runs) > SPAN_FRACTION * n_atoms:
        runs = whole
    # column of each atom: offset of its run in the buffer + its place in the run
    widths = runs[:, 1] - runs[:, 0]
    offsets = np.cumsum(widths) - widths
    k = np.searchsorted(runs[:, 0], atoms, side="right") - 1
    index = offsets[k] + atoms - runs[k, 0]
    if len(index) == offsets[-1] + runs[-1, 1] - runs[-1, 0] and np.array_equal(index, np.arange(len(index))):
        index = None
    return AtomReads(runs, index)
