"""Hand-made run reports with known answers for the report tests."""

from __future__ import annotations

from trajscale.facts import LayoutFacts
from trajscale.report.runfacts import RunFacts
from trajscale.report.summary import Report
from trajscale.report.timing import TaskTiming, summarize_workers

TASK_PHASES = ("t_init_traj", "t_io", "t_compute")        # measured inside each task
WORKER_PHASES = ("t_start", "t_init_top", "t_wait", "t_comm")   # the worker's own, outside tasks

BASE = {"t_start": 0.0, "t_init_top": 0.0, "t_init_traj": 0.1, "t_io": 1.0, "t_compute": 1.0, "t_wait": 0.0,
        "t_comm": 0.1}


def make_report(workers: list[dict] | None = None, *, n_workers: int | None = None,
                tasks_per_worker: int | list[int] = 2, frames_per_task: int = 50,
                bytes_per_frame: int = 1000, t_total: float | None = None, source: dict | LayoutFacts | None = None,
                executor: str = "mpi", n_atoms: int = 100, sched: bool = False,
                t0: float = 1_700_000_000.0, gap: float = 0.0) -> Report:
    """A report with one worker per dict of phase seconds (missing phases from ``BASE``).

    ``source`` may be a report JSON's ``source`` section (a dict, read as ``RunReport.load`` reads it).

    Task phases (init_traj, io, compute) are split evenly over the worker's
    tasks; init_top, wait and comm are recorded at the worker level.  Tasks of a
    worker run back to back from ``t0`` with ``gap`` seconds between them.
    """
    if workers is None:
        workers = [{} for _ in range(n_workers or 4)]
    specs = [{**BASE, **w} for w in workers]
    per = tasks_per_worker if isinstance(tasks_per_worker, list) else [tasks_per_worker] * len(specs)
    tasks, extras, frame, k = [], {}, 0, 0
    for i, (spec, n_t) in enumerate(zip(specs, per, strict=False)):
        name = f"rank {i}"
        clock = t0
        for _ in range(n_t):
            ph = {p: spec[p] / n_t for p in TASK_PHASES}
            dur = sum(ph.values())
            extra = {}
            if sched:
                extra = {"t_sched_start": clock - 0.01, "t_sched_stop": clock + dur + 0.01}
            tasks.append(TaskTiming(task=k, start=frame, stop=frame + frames_per_task, worker=name,
                                    host=f"node{i // 2}", pid=1000 + i,
                                    bytes_read=frames_per_task * bytes_per_frame,
                                    t_begin=clock, t_end=clock + dur, **ph, **extra))
            clock += dur + gap
            frame += frames_per_task
            k += 1
        extras[name] = {p: spec[p] for p in WORKER_PHASES}
        extras[name].update(host=f"node{i // 2}", pid=1000 + i)
    rows = summarize_workers(tasks, extras)
    wall = t_total if t_total is not None else max(w.t_total for w in rows)
    return Report(analysis="rmsd", executor=executor, n_workers=len(specs), n_frames=frame,
                  n_atoms=n_atoms, source=_facts(source or {"format": "h5md", "path": "traj.h5md"}),
                  t_total=wall, tasks=tasks, workers=rows, meta=RunFacts(n_tasks=len(tasks)))


def on_cores(report: Report, affinity: str, cpus: int = 64) -> Report:
    """``report`` with every worker and task recording the CPUs it may run on (``"0-1"``) of a ``cpus``-CPU host."""
    from dataclasses import replace

    tasks = [replace(t, cpus=cpus, affinity=affinity) for t in report.tasks]
    workers = [replace(w, cpus=cpus, affinity=affinity) for w in report.workers]
    return replace(report, tasks=tasks, workers=workers)


def _facts(source: dict | LayoutFacts) -> LayoutFacts:
    return source if isinstance(source, LayoutFacts) else LayoutFacts.from_dict(source)
