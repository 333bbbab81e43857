"""The few lines ``trajscale run`` prints at the end of a run."""

from __future__ import annotations

from .diagnose import Diagnosis, diagnose
from .metrics import fmt_ratio, worker_timings
from .timing import RunReport


def short_report(report: RunReport, diagnosis: Diagnosis | None = None) -> str:
    """A few lines for the end of ``trajscale run``: ratios, stragglers, top advice."""
    d = diagnosis or diagnose(report)
    imb = "n/a" if d.imbalance is None else f"{d.imbalance:.2f}"
    lines = [   # throughput is on the summary line above this block
        f"  R_comp/IO {fmt_ratio(d.r_comp_io)}, R_comp/comm {fmt_ratio(d.r_comp_comm)}",
        (f"  stragglers: {len(d.stragglers)} of {len(worker_timings(report))} workers, "
         f"{len(d.task_stragglers)} of {report.n_tasks} tasks; imbalance (max/median) {imb}"),
    ]
    if d.advice:
        a = d.advice[0]
        lines.append(f"  advice: {a.message} ({a.reason})")
    return "\n".join(lines)
