"""Stragglers: workers or tasks whose time exceeds 1.5 x the median (Khoshlessan et al. 2020), slow in the phase of
the largest excess.  A worker is compared on its start-up and its own work, never on its waits (a rank waiting for a
slow one is its victim), nor on a topology loaded once for the job; the plot and the text share :func:`worker_basis`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from .metrics import PHASE_LABELS, worker_timings
from .timing import PHASES, WORKER_PHASES, RunReport

#: A worker or task is a straggler when its time exceeds this x the median.
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

    @property
    def cause(self) -> str:
        """The component for people: "start-up", "read I/O", "communication", ..."""
        return PHASE_LABELS.get(self.component, self.component)


@dataclass(frozen=True)
class WorkerBasis:
    """What each worker is compared on: ``rows[i][phase]`` seconds for the counted ``phases``."""

    names: list[str]
    phases: tuple[str, ...]
    rows: list[dict[str, float]]
    factor: float = STRAGGLER_FACTOR

    @property
    def totals(self) -> list[float]:
        return [sum(r.values()) for r in self.rows]

    @property
    def limit(self) -> float | None:
        """``factor x median`` of the totals; None with fewer than two workers or nothing timed."""
        if len(self.rows) < 2:
            return None
        med = median(self.totals)
        return self.factor * med if med > 0 else None


def startup_in_run(worker, report: RunReport) -> float:
    """The part of a worker's start-up within the run (none for a pool or cluster ready before it began)."""
    begin = (report.process or {}).get("t_begin")
    t_start, ready = float(getattr(worker, "t_start", 0.0)), float(getattr(worker, "t_ready", 0.0))
    if begin and ready:
        return max(0.0, min(t_start, ready - float(begin)))
    return t_start


def worker_basis(report: RunReport, factor: float = STRAGGLER_FACTOR) -> WorkerBasis:
    """Each worker's compared time (module docstring), as the diagnosis and the plot use it."""
    workers = worker_timings(report)
    leave = {"t_wait"} | ({"t_init_top"} if sum(w.t_init_top > 0 for w in workers) == 1 else set())
    phases = tuple(p for p in WORKER_PHASES if p not in leave)
    rows = [{p: (startup_in_run(w, report) if p == "t_start" else float(getattr(w, p))) for p in phases}
            for w in workers]
    return WorkerBasis([w.worker for w in workers], phases, rows, factor)


def _get(row, phase: str) -> float:
    return float(row[phase] if isinstance(row, dict) else getattr(row, phase))


def find_stragglers(rows: Sequence, names: Sequence[str], kind: str,
                    factor: float = STRAGGLER_FACTOR, leave_out: tuple[str, ...] = (),
                    phases: Sequence[str] = PHASES) -> list[Straggler]:
    """Rows with ``total > factor x median``, slowest first, ``leave_out`` phases not compared."""
    if len(rows) < 2:
        return []
    phases = [p for p in phases if p not in leave_out]
    totals = [sum(_get(r, p) for p in phases) for r in rows]
    med = median(totals)
    if med <= 0:
        return []
    phase_med = {p: median(_get(r, p) for r in rows) for p in phases}
    out = []
    for r, name, t in zip(rows, names, totals, strict=False):
        if t > factor * med:
            excess = {p: _get(r, p) - phase_med[p] for p in phases}
            comp = max(excess, key=excess.get)
            out.append(Straggler(kind, name, t, t / med, comp, excess[comp]))
    return sorted(out, key=lambda s: -s.t_total)


def worker_stragglers(basis: WorkerBasis) -> list[Straggler]:
    """The stragglers among the workers of ``basis``: exactly the bars above its :attr:`~WorkerBasis.limit`."""
    return find_stragglers(basis.rows, basis.names, "worker", basis.factor, phases=basis.phases)
