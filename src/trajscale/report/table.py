"""Plain-text tables of a run report: per-worker phases, totals, derived numbers, advice."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..executor_registry import EXECUTORS
from .advice import diagnose
from .conditions import RunConditions
from .diagnose import Diagnosis
from .metrics import fmt_comm_ratio, scaling, worker_timings
from .timing import PHASES, RunReport

#: Short column headers for the phases.
HEADERS = {"t_init_top": "init_top", "t_init_traj": "init_traj", "t_io": "io",
           "t_compute": "compute", "t_wait": "wait", "t_comm": "comm"}


def _num(x: float | None, fmt: str = ".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, fmt)


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    """Left-align the first column, right-align the rest."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False)))

    return [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def _busiest(workers) -> str:
    """The busiest worker's task time, as the table's row for it adds up."""
    if not workers:
        return "no workers"
    w = max(workers, key=lambda w: w.t_total - w.t_init_top)
    busy = w.t_total - w.t_init_top
    if w.t_init_top > 0:   # rank 0 / serial: its row also holds the job's topology load
        return (f"busiest worker {w.worker}: {_num(busy)} s of work + {_num(w.t_init_top)} s topology "
                f"load = {_num(w.t_total)} s")
    return f"busiest worker {w.worker}: {_num(busy)} s"


def _process_lines(report: RunReport) -> list[str]:
    """The launching process from its start: wall time and each phase (none for older reports)."""
    from ..timeline import PROCESS_PHASE_LABELS

    p = report.process or {}
    phases, wall = p.get("phases") or {}, float(p.get("t_wall") or 0.0)
    if wall <= 0 or not phases:
        return []
    start = "its start" if p.get("origin", "process start") == "process start" else "the run's start"
    covered = sum(float(v) for v in phases.values())
    out = [f"process: {wall:.3f} s wall from {start}; the phases below cover {100 * covered / wall:.0f} %"]
    out += _grid(["phase", "s", "%"], [[PROCESS_PHASE_LABELS.get(k, k), _num(float(v)), f"{100 * float(v) / wall:.1f}"]
                                       for k, v in phases.items()])
    return out


def _condition_lines(report: RunReport) -> list[str]:
    """What else the machine ran while the run ran, and its files' page-cache state at its start."""
    conds = RunConditions.from_dict(report.conditions)
    out = []
    if conds.load is not None:
        busy = " (BUSY: its times are slower than this machine gives when idle)" if conds.load.busy else ""
        out.append(f"machine load: {conds.load.describe().removeprefix('run: ')}{busy}")
    if conds.page_cache is not None:
        out.append(f"page cache: {conds.page_cache.describe()}")
    return out


def _job_lines(report: RunReport) -> list[str]:
    """The scheduler's job the run ran in, and the jobs its workers ran in; none without a scheduler."""
    job, lines = report.meta.job, []
    if job is not None:
        said = f"job {job.job_id}" + (f" step {job.step_id}" if job.step_id is not None else "")
        lines.append(said + (f", requeued {job.restart_count} time(s)" if job.restart_count else ""))
    if report.meta.worker_jobs:
        lines.append(f"workers' jobs: {', '.join(report.meta.worker_jobs)}")
    return lines


def format_table(report: RunReport, diagnosis: Diagnosis | None = None) -> str:
    """The full report: run facts, per-worker phases (s), totals, derived numbers, stragglers, advice."""
    d = diagnosis or diagnose(report)
    src = report.source
    lines = [
        (f"{report.analysis} on {report.executor} x{report.n_workers}: {d.frames} frames x "
         f"{report.n_atoms} atoms in {report.n_tasks} tasks, {report.t_total:.3f} s wall "
         f"(prepare {report.t_prepare:.3f} s, reduce {report.t_reduce:.3f} s)"),
        f"source: {'?' if src.format is None else src.format} {src.path or ''}".rstrip(),
    ]
    if src.chunks is not None:
        chunks = list(src.chunks) if src.chunks else "contiguous"
        lines.append(f"layout: chunks {chunks}, compression {'?' if src.compression is None else src.compression}")
    io = report.meta.io
    opens_collectively = report.executor in EXECUTORS and EXECUTORS[report.executor].collective_open
    if opens_collectively and io is not None:
        lines.append(f"read with HDF5 driver {io.driver or 'default'}, "
                     f"{'collective' if io.collective else 'independent'} reads")
    lines += _job_lines(report)
    lines += _process_lines(report)
    lines += _condition_lines(report)
    for a in report.meta.analyses:   # several analyses in one pass: the reads are shared, the compute is each one's
        atoms = "all" if a.n_atoms is None else a.n_atoms
        lines.append(f"analysis {a.name}: {atoms} atoms, compute {a.t_compute:.3f} s (summed over its tasks)")
    lines.append("")
    header = ["worker", "host", "pid", "tasks", "frames", "MB", "start", *(HEADERS[p] for p in PHASES), "total"]
    rows = []
    strag = {s.name for s in d.stragglers}
    workers = worker_timings(report)
    for w in workers:
        rows.append([w.worker + (" *" if w.worker in strag else ""), w.host, str(w.pid), str(w.n_tasks),
                     str(w.frames), f"{w.bytes_read / 1e6:.2f}", _num(w.t_start),
                     *(_num(getattr(w, p)) for p in PHASES), _num(w.t_total)])
    rows.append(["sum", "", "", str(sum(w.n_tasks for w in workers)), str(sum(w.frames for w in workers)),
                 f"{sum(w.bytes_read for w in workers) / 1e6:.2f}", "", *(_num(d.totals[p]) for p in PHASES),
                 _num(sum(d.totals.values()))])
    lines += _grid(header, rows)
    lines.append("(start: from the process's start to ready for its first task; not in total)")
    if strag:
        lines.append("(* straggler: start-up and work, waits left out, > 1.5 x median)")
    lines += ["", "derived:"]
    fps = "n/a" if d.frames_per_s is None else f"{d.frames_per_s:,.0f}"
    lines += [
        f"  throughput        {fps} frames/s, {_num(d.gb_per_s, '.3g')} GB/s",
        f"  R_comp/IO         {_num(d.r_comp_io, '.3g')}",
        f"  R_comp/comm       {fmt_comm_ratio(d, '.3g')}",
        (f"  imbalance         {_num(d.imbalance, '.2f')} (max/median worker time, median "
         f"{_num(d.median_worker_time)} s)"),
        (f"  fixed costs       {_num(d.fixed_costs(report))} s of {_num(report.t_total)} s wall (prepare "
         f"{_num(report.t_prepare)} s, outside tasks {_num(d.t_outside)} s; {_busiest(workers)})"),
    ]
    if d.speedup is not None:
        lines.append(f"  speed-up S(N)     {_num(d.speedup, '.2f')}, efficiency E(N) {_num(d.efficiency, '.2f')}")
    if d.too_short:
        lines.append(f"  too short         {_num(d.t_work)} s of tasks on the busiest worker: not diagnosed")
    for m in d.machine:   # workers that ran tasks on each host, and the cores they were allowed
        over = " (more workers than cores)" if m["workers"] > m["cores"] else ""
        lines.append(f"  machine           {m['host']}: {m['workers']} workers on {m['cores']} cores "
                     f"(CPUs {m['affinity']} of its {m['cpus']}){over}")
    lines.append("")
    if d.stragglers or d.task_stragglers:
        lines.append(f"stragglers ({len(d.stragglers)} workers, {len(d.task_stragglers)} tasks):")
        for s in [*d.stragglers, *d.task_stragglers]:
            lines.append(f"  {s.kind} {s.name}: {s.t_total:.3f} s = {s.ratio:.1f}x median; slow in "
                         f"{s.component} ({s.cause}, +{s.excess:.3f} s over its median)")
    else:
        lines.append("stragglers: none")
    for w in src.warnings or ():
        lines.append(f"layout warning: {w}")
    lines.append("")
    if d.advice:
        lines.append("advice:")
        for a in d.advice:
            lines += [f"  - {a.message}", f"    because {a.reason}"]
    else:
        lines.append("advice: none")
    return "\n".join(lines)


def format_scaling(reports: Sequence[RunReport], baseline: RunReport | None = None) -> str:
    """Scaling table S(N), E(N) relative to ``baseline`` or the report with the smallest N."""
    points = scaling(reports, reference=baseline)
    ref = baseline or min(reports, key=lambda r: (r.n_workers, r.t_total))
    header = ["executor", "N", "t_total (s)", "S(N)", "E(N)"]
    rows = [[p.executor, str(p.n_workers), f"{p.t_total:.3f}", _num(p.speedup, ".2f"), _num(p.efficiency, ".2f")]
            for p in points]
    title = f"scaling relative to {ref.executor} N={ref.n_workers} ({ref.t_total:.3f} s):"
    return "\n".join([title, *_grid(header, rows)])


__all__ = ["format_scaling", "format_table"]
