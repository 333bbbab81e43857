"""Stragglers: workers or tasks whose total time exceeds 1.5 x the median (seed 001).

The phase that made one slow is the one with the largest excess over that phase's median.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from .timing import PHASES

#: A worker or task is a straggler when its total time exceeds this x the median.
STRAGGLER_FACTOR = 1.5


@dataclass(frozen=True, slots=True)
class Straggler:
    """A worker or task slower than ``STRAGGLER_FACTOR`` x the median."""

    kind: str            # "worker" or "task"
    name: str            # worker name, or "task 3 (worker ...)"
    t_total: float
    ratio: float         # t_total / median t_total
    component: str       # phase with the largest excess over its median, e.g. "t_comm"
    excess: float        # seconds of that phase above its median


def find_stragglers(rows: Sequence, names: Sequence[str], kind: str,
                    factor: float = STRAGGLER_FACTOR, leave_out: tuple[str, ...] = ()) -> list[Straggler]:
    """Rows (WorkerTiming or TaskTiming) with ``t_total > factor x median``, slowest first.

    ``leave_out`` names phases that are not the work being compared (e.g. a
    topology loaded once, on one rank, for the whole job).
    """
    if len(rows) < 2:
        return []
    phases = [p for p in PHASES if p not in leave_out]
    totals = [sum(getattr(r, p) for p in phases) for r in rows]
    med = median(totals)
    if med <= 0:
        return []
    phase_med = {p: median(getattr(r, p) for r in rows) for p in phases}
    out = []
    for r, name, t in zip(rows, names, totals):
        if t > factor * med:
            excess = {p: getattr(r, p) - phase_med[p] for p in phases}
            comp = max(excess, key=excess.get)
            out.append(Straggler(kind, name, t, t / med, comp, excess[comp]))
    return sorted(out, key=lambda s: -s.t_total)
