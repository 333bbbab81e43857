"""Plots of run reports: per-worker stacked phase bars (seed 000, Fig. 1) and scaling curves."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from .diagnose import diagnose
from .metrics import PHASE_LABELS, scaling, worker_timings
from .timing import PHASES, RunReport

log = logging.getLogger(__name__)

#: One colour per phase (matplotlib's tab10, fixed so every plot reads the same).
PHASE_COLORS = {
    "t_init_top": "#7f7f7f", "t_init_traj": "#8c564b", "t_io": "#1f77b4",
    "t_compute": "#ff7f0e", "t_wait": "#bcbd22", "t_comm": "#d62728",
}
MAX_TICK_LABELS = 32


def _bar_panel(ax, report: RunReport, legend: bool) -> int:
    """Stacked bars, one per worker and one segment per phase; returns the number of bar patches."""
    workers = worker_timings(report)
    x = list(range(len(workers)))
    bottom = [0.0] * len(workers)
    n = 0
    for p in PHASES:
        h = [float(getattr(w, p)) for w in workers]
        bars = ax.bar(x, h, bottom=bottom, color=PHASE_COLORS[p], label=PHASE_LABELS[p],
                      width=0.8, edgecolor="none")
        n += len(bars.patches)
        bottom = [b + v for b, v in zip(bottom, h)]
    d = diagnose(report)
    strag = {s.name for s in d.stragglers}
    step = max(1, -(-len(workers) // MAX_TICK_LABELS))
    ticks = sorted(set(x[::step]) | {i for i, w in enumerate(workers) if w.worker in strag})
    ax.set_xticks(ticks)
    labels = [workers[i].worker + (" *" if workers[i].worker in strag else "") for i in ticks]
    ax.set_xticklabels(labels, rotation=30 if len(workers) > 4 else 0, ha="right" if len(workers) > 4 else "center",
                       fontsize=8)
    if d.median_worker_time:
        ax.axhline(1.5 * d.median_worker_time, color="k", ls=":", lw=0.8, label="straggler limit (1.5 x median)")
    ax.set_ylabel("time (s)")
    ax.set_xlabel("worker" + ("  (* straggler)" if strag else ""))
    ax.set_title(f"{report.analysis} on {report.executor} x{report.n_workers}: {d.frames} frames in "
                 f"{report.n_tasks} tasks, {report.t_total:.2f} s wall", fontsize=10)
    ax.set_xlim(-0.6, len(workers) - 0.4)
    if legend:
        handles, labels = ax.get_legend_handles_labels()
        order = [i for i, h in enumerate(handles) if h not in ax.containers] \
            + [i for i, h in reversed(list(enumerate(handles))) if h in ax.containers]   # top of stack first
        ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return n


def _scaling_panels(ax_s, ax_e, reports: Sequence[RunReport], baseline: RunReport | None) -> None:
    pts = scaling(reports, reference=baseline)
    ns = [p.n_workers for p in pts]
    n0 = max(1, baseline.n_workers if baseline is not None else ns[0])
    ax_s.plot(ns, [p.speedup for p in pts], "o-", color="#1f77b4", label="measured")
    ax_s.plot(ns, [n / n0 for n in ns], "--", color="0.5", label="ideal")
    ax_s.set_xlabel("workers N")
    ax_s.set_ylabel(f"speed-up S(N) vs N={n0}")
    ax_s.legend(fontsize=8, frameon=False)
    ax_e.plot(ns, [p.efficiency for p in pts], "o-", color="#ff7f0e", label="measured")
    ax_e.axhline(1.0, ls="--", color="0.5", label="ideal")
    ax_e.set_xlabel("workers N")
    ax_e.set_ylabel(f"efficiency E(N) vs N={n0}")
    ax_e.set_ylim(0, max(1.1, max(p.efficiency for p in pts) * 1.1))
    ax_e.legend(fontsize=8, frameon=False)
    for ax in (ax_s, ax_e):
        ax.set_xticks(sorted(set(ns)))
        ax.grid(alpha=0.3)


def plot_report(reports: Sequence[RunReport] | RunReport, path: str | os.PathLike, dpi: int = 120,
                baseline: RunReport | None = None) -> dict:
    """Plot where the time went, per worker, and the scaling across reports.

    Parameters
    ----------
    reports
        One report, or several of the same job at different worker counts N.
        Each gets a panel of stacked bars (one bar per worker, one colour per
        phase); with several, a row with S(N) and E(N) relative to the report
        with the smallest N is added.
    path
        Output image; the format follows the suffix (PNG, PDF, SVG).  Written
        to a temporary name and renamed when complete.
    dpi
        Resolution of raster outputs.
    baseline
        Optional serial or N=1 report: the scaling panel is relative to it
        instead of the smallest N among ``reports`` (and is drawn even for
        one report).

    Returns
    -------
    dict
        ``path``, ``n_bars`` (bar segments drawn), ``bars_per_panel`` and
        ``n_axes``, counted from the figure before it was saved.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..util import atomic_output

    if isinstance(reports, RunReport):
        reports = [reports]
    reports = sorted(reports, key=lambda r: r.n_workers)
    if not reports:
        raise ValueError("plot_report needs at least one report")
    multi = len(reports) > 1 or baseline is not None
    n_rows = len(reports) + (1 if multi else 0)
    max_w = max(len(worker_timings(r)) for r in reports)
    width = min(16.0, max(7.5, 3.5 + 0.35 * max_w))
    fig = plt.figure(figsize=(width, 3.4 * n_rows), layout="constrained")
    grid = fig.add_gridspec(n_rows, 2)
    bars_per_panel = []
    for i, r in enumerate(reports):
        ax = fig.add_subplot(grid[i, :])
        _bar_panel(ax, r, legend=(i == 0))
        bars_per_panel.append(len(ax.patches))
    if multi:
        _scaling_panels(fig.add_subplot(grid[-1, 0]), fig.add_subplot(grid[-1, 1]), reports, baseline)
    info = {"path": str(path), "n_bars": sum(bars_per_panel), "bars_per_panel": bars_per_panel,
            "n_axes": len(fig.axes)}
    fmt = os.path.splitext(str(path))[1].lstrip(".").lower() or "png"
    try:
        with atomic_output(path) as tmp:
            fig.savefig(tmp, dpi=dpi, format=fmt)
    finally:
        plt.close(fig)
    log.debug("wrote %s (%d bars)", path, info["n_bars"])
    return info


__all__ = ["PHASE_COLORS", "plot_report"]
