"""Plots of run reports: the launching process, per-worker phase bars (Jakupovic & Beckstein 2021) and scaling."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from .advice import diagnose
from .metrics import PHASE_LABELS, scaling, worker_timings
from .stragglers import worker_basis
from .timing import WORKER_PHASES, RunReport

log = logging.getLogger(__name__)

#: One colour per phase (matplotlib's tab10, fixed so every plot reads the same).
PHASE_COLORS = {
    "t_start": "#9467bd", "t_init_top": "#7f7f7f", "t_init_traj": "#8c564b", "t_io": "#1f77b4",
    "t_compute": "#ff7f0e", "t_wait": "#bcbd22", "t_comm": "#d62728",
}
#: The launching process's phases (report.process), from its start.
PROCESS_COLORS = {
    "imports": "#9467bd", "mpi_init": "#e377c2", "cluster_start": "#bcbd22", "queue_wait": "#8c564b",
    "pool_start": "#17becf", "topology": "#7f7f7f",
    "prepare": "#c5b0d5", "tasks": "#1f77b4", "reduce": "#2ca02c", "report": "#dbdb8d",
    "write": "#98df8a",
}
MAX_TICK_LABELS = 32


def _bar_panel(ax, report: RunReport, legend: bool) -> dict:
    """Stacked bars, one per worker: start-up and work, the time stragglers are judged on, beside a thin
    hatched bar of the time left out of it.  Returns worker ``names``, bar ``tops``, the straggler
    ``limit`` (None: not drawn) and the ``stragglers`` marked."""
    d = diagnose(report)
    basis = worker_basis(report)
    workers = worker_timings(report)
    x = list(range(len(workers)))
    bottom = [0.0] * len(workers)
    for p in basis.phases:
        h = [row[p] for row in basis.rows]
        ax.bar(x, h, bottom=bottom, color=PHASE_COLORS[p], label=PHASE_LABELS[p], width=0.62, edgecolor="none")
        bottom = [b + v for b, v in zip(bottom, h, strict=False)]
    left_out = [p for p in WORKER_PHASES if p not in basis.phases]
    side = [0.0] * len(workers)
    for p in left_out:
        h = [float(getattr(w, p)) for w in workers]
        ax.bar([i + 0.39 for i in x], h, bottom=side, color=PHASE_COLORS[p], alpha=0.55, hatch="//",
               width=0.16, edgecolor="none", label=f"{PHASE_LABELS[p]} (not compared)")
        side = [b + v for b, v in zip(side, h, strict=False)]
    strag = {s.name for s in d.stragglers}
    step = max(1, -(-len(workers) // MAX_TICK_LABELS))
    ticks = sorted(set(x[::step]) | {i for i, w in enumerate(workers) if w.worker in strag})
    ax.set_xticks(ticks)
    labels = [workers[i].worker + (" *" if workers[i].worker in strag else "") for i in ticks]
    ax.set_xticklabels(labels, rotation=30 if len(workers) > 4 else 0, ha="right" if len(workers) > 4 else "center",
                       fontsize=8)
    # The diagnosis's own limit; a run too short to diagnose gets none (its start-up stragglers are marked *).
    limit = None if d.too_short else basis.limit
    if limit is not None:
        ax.axhline(limit, color="k", ls=":", lw=0.8, label=f"straggler limit ({basis.factor:g} x median)")
    ax.set_ylabel("time from process start (s)")
    ax.set_xlabel("worker" + ("  (* straggler)" if strag else ""))
    short = "; too short to diagnose" if d.too_short else ""
    ax.set_title(f"{report.analysis} on {report.executor} x{report.n_workers}: {d.frames} frames in "
                 f"{report.n_tasks} tasks, {report.t_total:.2f} s run{short}", fontsize=9, loc="left")
    ax.set_xlim(-0.6, len(workers) - 0.4)
    if legend:
        handles, labels = ax.get_legend_handles_labels()
        order = [i for i, h in enumerate(handles) if h not in ax.containers] \
            + [i for i, h in reversed(list(enumerate(handles))) if h in ax.containers]   # top of stack first
        ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return {"names": basis.names, "tops": basis.totals, "limit": limit, "stragglers": sorted(strag)}


def _process_panel(ax, report: RunReport) -> dict:
    """The launching process's wall time from its start, one segment per phase (report.process)."""
    from ..timeline import PROCESS_PHASE_LABELS
    from .trace import TRACE_PROCESS_ORDER

    p = report.process or {}
    phases = p.get("phases") or {}
    wall = float(p.get("t_wall") or 0.0)
    left = 0.0
    for k in [k for k in TRACE_PROCESS_ORDER if k in phases]:
        w = float(phases[k])
        if w > 0:   # (phases under 5 ms are drawn but not listed)
            ax.barh([0], [w], left=[left], color=PROCESS_COLORS.get(k, "0.5"), height=0.6,
                    label=f"{PROCESS_PHASE_LABELS.get(k, k)} {w:.2f} s" if w >= 0.005 else None)
            left += w
    ax.set_yticks([])
    ax.set_xlim(0, max(wall, left) * 1.01 or 1.0)
    ax.set_xlabel("seconds from the launching process's start", fontsize=8)
    ax.set_title(f"{report.executor} x{report.n_workers}, launching process: {wall:.2f} s wall from its start, "
                 f"phases cover {100 * left / wall:.0f} %" if wall > 0 else "launching process", fontsize=9, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.3), fontsize=7, frameon=False, ncol=2)
    return {"wall": wall, "covered": left}


def _scaling_panels(ax_s, ax_e, reports: Sequence[RunReport], baseline: RunReport | None) -> dict[str, list]:
    """S(N) and E(N), one series per executor (processes and MPI at N=2 are different runs)."""
    pts = scaling(reports, reference=baseline)
    ns = [p.n_workers for p in pts]
    n0 = max(1, baseline.n_workers if baseline is not None else ns[0])
    series: dict[str, list] = {}
    for p in pts:
        series.setdefault(p.executor or "?", []).append(p)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    for i, (ex, mine) in enumerate(series.items()):
        c = colors[i % len(colors)]
        ax_s.plot([p.n_workers for p in mine], [p.speedup for p in mine], "o-", color=c, label=ex)
        ax_e.plot([p.n_workers for p in mine], [p.efficiency for p in mine], "o-", color=c, label=ex)
    ax_s.plot(sorted(set(ns)), [n / n0 for n in sorted(set(ns))], "--", color="0.5", label="ideal")
    ax_s.set_ylabel(f"speed-up S(N) vs N={n0}")
    ax_e.axhline(1.0, ls="--", color="0.5", label="ideal")
    ax_e.set_ylabel(f"efficiency E(N) vs N={n0}")
    ax_e.set_ylim(0, max(1.1, max(p.efficiency for p in pts) * 1.1))
    for ax in (ax_s, ax_e):
        ax.set_xlabel("workers N")
        ax.legend(fontsize=8, frameon=False)
        ax.set_xticks(sorted(set(ns)))
        ax.grid(alpha=0.3)
    return {ex: [(p.n_workers, p.speedup) for p in mine] for ex, mine in series.items()}


def plot_report(reports: Sequence[RunReport] | RunReport, path: str | os.PathLike, dpi: int = 120,
                baseline: RunReport | None = None) -> dict:
    """Plot where the time went, per worker, and the scaling across reports.

    Parameters
    ----------
    reports
        One report, or several of the same job at different worker counts N. Each gets a panel of stacked bars (one
        bar per worker, one colour per phase); with several, a row with S(N) and E(N) relative to the report with
        the smallest N is added.
    path
        Output image; the format follows the suffix (PNG, PDF, SVG).  Written to a temporary name and renamed when
        complete.
    dpi
        Resolution of raster outputs.
    baseline
        Optional serial or N=1 report: the scaling panel is relative to it instead of the smallest N among
        ``reports`` (and is drawn even for one report).

    Returns
    -------
    dict
        ``path``, ``n_bars`` (bar segments drawn), ``bars_per_panel`` and ``n_axes``, counted from the figure before
        it was saved; ``panels`` (per report: worker names, bar tops, the straggler limit drawn, stragglers marked),
        ``processes`` (per report with a process record: its wall and the seconds its phases cover) and
        ``scaling_series`` (executor -> [(N, S(N))]).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..util import save_output

    if isinstance(reports, RunReport):
        reports = [reports]
    reports = sorted(reports, key=lambda r: r.n_workers)
    if not reports:
        raise ValueError("plot_report needs at least one report")
    multi = len(reports) > 1 or baseline is not None
    rows = []   # (kind, report): a process strip above the bars of each report that has a process record
    for r in reports:
        if (r.process or {}).get("phases"):
            rows.append(("process", r))
        rows.append(("bars", r))
    if multi:
        rows.append(("scaling", None))
    heights = [0.9 if kind == "process" else 3.4 for kind, _ in rows]
    max_w = max(len(worker_timings(r)) for r in reports)
    width = min(16.0, max(10.0, 6.0 + 0.35 * max_w))
    fig = plt.figure(figsize=(width, sum(heights)), layout="constrained")
    grid = fig.add_gridspec(len(rows), 2, height_ratios=heights)
    bars_per_panel, panels, processes, series = [], [], [], {}
    for i, (kind, r) in enumerate(rows):
        if kind == "process":
            processes.append(_process_panel(fig.add_subplot(grid[i, :]), r))
        elif kind == "bars":
            ax = fig.add_subplot(grid[i, :])
            panels.append(_bar_panel(ax, r, legend=not panels))
            bars_per_panel.append(len(ax.patches))
        else:
            series = _scaling_panels(fig.add_subplot(grid[i, 0]), fig.add_subplot(grid[i, 1]), reports, baseline)
    info = {"path": str(path), "n_bars": sum(bars_per_panel), "bars_per_panel": bars_per_panel,
            "n_axes": len(fig.axes), "panels": panels, "processes": processes, "scaling_series": series}
    fmt = os.path.splitext(str(path))[1].lstrip(".").lower() or "png"
    try:
        save_output(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format=fmt))
    finally:
        plt.close(fig)
    log.debug("wrote %s (%d bars)", path, info["n_bars"])
    return info


__all__ = ["PHASE_COLORS", "plot_report"]
