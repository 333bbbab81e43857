"""Derived numbers of runs: phase totals, ratios, S(N) and E(N) (Khoshlessan et al. 2020): ``R_comp/IO =
sum(t_compute) / sum(t_io)`` (eq. 7) and ``R_comp/comm = sum(t_compute) / sum(t_comm)`` (eq. 8)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .timing import PHASES, RunReport, WorkerTiming, summarize_workers

PHASE_LABELS = {
    "t_start": "start-up", "t_init_top": "topology", "t_init_traj": "open trajectory", "t_io": "read I/O",
    "t_compute": "compute", "t_wait": "wait", "t_comm": "communication",
}


@dataclass(frozen=True, slots=True)
class ScalingPoint:
    """Speed-up and efficiency of one report relative to a reference report."""

    n_workers: int
    t_total: float
    speedup: float
    efficiency: float
    executor: str = ""   # labels the row when reports of several executors are compared


def json_safe(x):
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x


def ratio(num: float, den: float) -> float | None:
    """``num / den``; ``inf`` when only the denominator is zero, None when both are."""
    if den > 0:
        return num / den
    return math.inf if num > 0 else None


def fmt_ratio(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "inf" if math.isinf(x) else f"{x:.2g}"


def fmt_comm_ratio(d, fmt: str = ".2g") -> str:
    """R_comp/comm of a diagnosis for people: "n/a" when nothing was communicated (not "inf")."""
    if not d.totals.get("t_comm") or d.r_comp_comm is None:
        return "n/a"
    return "inf" if math.isinf(d.r_comp_comm) else format(d.r_comp_comm, fmt)


def worker_timings(report: RunReport) -> list[WorkerTiming]:
    """The report's per-worker records, or ones summed from its tasks if it has none."""
    return list(report.workers) if report.workers else summarize_workers(list(report.tasks))


def phase_totals(report: RunReport) -> dict[str, float]:
    """Sum of each phase over all workers (tasks plus worker-level wait/comm)."""
    rows = worker_timings(report)
    return {p: float(sum(getattr(w, p) for w in rows)) for p in PHASES}


def scaling(reports: Sequence[RunReport], reference: RunReport | None = None) -> list[ScalingPoint]:
    """S(N) = t_ref / t_N and E(N) = S(N) x N_ref / N per report, sorted by N (default reference: the smallest N)."""
    reports = list(reports)
    if reference is not None and not any(r is reference for r in reports):
        reports.append(reference)
    if not reports:
        return []
    ordered = sorted(reports, key=lambda r: (r.n_workers, r.t_total))
    ref = reference or ordered[0]
    return [speedup_point(r, ref) for r in ordered]


def speedup_point(report: RunReport, reference: RunReport) -> ScalingPoint:
    """S and E of ``report`` relative to ``reference`` (``t_total`` of both)."""
    s = reference.t_total / report.t_total if report.t_total > 0 else math.nan
    return ScalingPoint(report.n_workers, report.t_total, s,
                        s * max(1, reference.n_workers) / max(1, report.n_workers), report.executor)
