"""The diagnosis of one run: derived numbers and stragglers (the advice on them is :mod:`.advice`'s)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from statistics import median

from ..timeline import cpu_list, parse_cpu_list
from .metrics import json_safe, phase_totals, ratio, speedup_point, worker_timings
from .stragglers import Straggler, find_stragglers, worker_basis, worker_stragglers
from .timing import RunReport

#: Runs whose busiest worker spent less than this in its tasks are too short to diagnose:
#: stragglers, imbalance and scaling read from tasks of a few hundredths of a second are noise.
SHORT_RUN_S = 1.0


@dataclass
class Diagnosis:
    """Derived numbers of one run."""

    totals: dict[str, float]
    r_comp_io: float | None
    r_comp_comm: float | None
    frames: int
    frames_per_s: float | None
    gb_per_s: float | None
    imbalance: float | None
    median_worker_time: float | None
    stragglers: list[Straggler] = field(default_factory=list)
    task_stragglers: list[Straggler] = field(default_factory=list)
    speedup: float | None = None
    efficiency: float | None = None
    #: Seconds the busiest worker spent in its tasks (topology load left out).
    t_busy: float = 0.0
    #: Wall time of the map phase that no task accounts for: starting workers,
    #: dispatching tasks, moving results (t_total - t_prepare - t_reduce - t_busy).
    t_outside: float = 0.0
    #: :class:`~.advice.Advice` records, best first; filled by :func:`.advice.diagnose`.
    advice: list = field(default_factory=list)
    #: Seconds of work (tasks and own communication; no start-up, no waiting) of the busiest worker.
    t_work: float = 0.0
    #: True when ``t_work`` is too little to diagnose (:data:`SHORT_RUN_S`): then only
    #: start-up stragglers of a second or more are kept, and the advice says so in one line.
    too_short: bool = False
    #: Per host: ``{"host", "workers", "cores", "affinity", "cpus"}``: the workers that ran tasks there, the
    #: cores their affinity allowed, listed, and the host's CPUs (empty for older reports).
    machine: list[dict] = field(default_factory=list)

    @property
    def oversubscribed(self) -> list[dict]:
        """The hosts of :attr:`machine` where more workers ran than they had cores."""
        return [m for m in self.machine if m["workers"] > m["cores"]]

    def fixed_costs(self, report: RunReport) -> float:
        """Serial preparation and reduction plus the time outside tasks, in seconds."""
        return report.t_prepare + report.t_reduce + self.t_outside

    def to_dict(self) -> dict:
        """JSON-friendly dict; infinities become the string ``"inf"``."""
        return json_safe(asdict(self))


def measure(report: RunReport, baseline: RunReport | None = None) -> Diagnosis:
    """Derived numbers and stragglers of one run (no advice yet: :func:`.advice.diagnose` adds it).

    ``baseline``: a serial or N=1 run of the same job, giving S(N) = t1 / tN and E(N) = S(N) / N from the reports'
    ``t_total`` (for a baseline with N_b > 1 workers, E(N) = S(N) x N_b / N).
    """
    totals = phase_totals(report)
    workers = worker_timings(report)
    frames = sum(t.frames for t in report.tasks) if report.tasks else report.n_frames
    wall = report.t_total
    w_totals = [w.t_total for w in workers]
    med = median(w_totals) if w_totals else None
    imbalance = max(w_totals) / med if med else None
    tasks = list(report.tasks)
    d = Diagnosis(
        totals=totals,
        r_comp_io=ratio(totals["t_compute"], totals["t_io"]),
        r_comp_comm=ratio(totals["t_compute"], totals["t_comm"]),
        frames=frames,
        frames_per_s=frames / wall if wall > 0 else None,
        gb_per_s=report.bytes_read / 1e9 / wall if wall > 0 else None,
        imbalance=imbalance,
        median_worker_time=med,
        # Start-up and work, not waits nor a topology loaded once for the job (stragglers.py).
        stragglers=worker_stragglers(basis := worker_basis(report)),
        task_stragglers=find_stragglers(tasks, [f"{t.task} ({t.worker})" for t in tasks], "task"),
    )
    d.t_busy = max((w.t_total - w.t_init_top for w in workers), default=0.0)
    d.t_work = max((sum(v for p, v in row.items() if p != "t_start") for row in basis.rows), default=0.0)
    if workers and d.t_work < SHORT_RUN_S:
        # Too short to tell tasks apart from noise; a start-up of a second or more still counts.
        d.too_short = True
        d.stragglers = [s for s in d.stragglers if s.component == "t_start" and s.excess >= SHORT_RUN_S]
        d.task_stragglers = []
    d.t_outside = max(0.0, wall - report.t_prepare - report.t_reduce - d.t_busy)
    d.machine = workers_per_host(report)
    if baseline is not None:
        point = speedup_point(report, baseline)
        d.speedup, d.efficiency = point.speedup, point.efficiency
    return d


def workers_per_host(report: RunReport) -> list[dict]:
    """The workers that ran tasks on each host and the union of their affinities (unrecorded CPUs: host left out)."""
    hosts: dict[str, dict] = {}
    for w in worker_timings(report):
        if not w.n_tasks:
            continue
        h = hosts.setdefault(w.host, {"host": w.host, "workers": 0, "allowed": set(), "cpus": 0, "known": True})
        h["workers"] += 1
        h["cpus"] = max(h["cpus"], int(w.cpus))
        allowed = parse_cpu_list(w.affinity)
        h["known"] &= bool(allowed)
        h["allowed"] |= allowed
    return [{"host": h["host"], "workers": h["workers"], "cores": len(h["allowed"]),
             "affinity": cpu_list(h["allowed"]), "cpus": h["cpus"]}
            for h in hosts.values() if h["known"]]
