"""Chrome / Perfetto trace-event JSON of a run report (https://ui.perfetto.dev, ``chrome://tracing``).

Each worker is a process track of task-phase slices from each task's ``t_begin`` (Dask: also the scheduler's view),
and the launching process a track of its phases; timestamps are microseconds, monotonic and never overlapping."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from .metrics import worker_timings
from .timing import PHASES, RunReport, TaskTiming

_US = 1e6
_EPS = 1e-9


#: The launching process's phases in the order the trace lays them out (about the order they happen).
TRACE_PROCESS_ORDER = ("imports", "mpi_init", "cluster_start", "queue_wait", "pool_start", "topology", "prepare",
                       "tasks", "reduce", "report", "write")


def _process_slices(report: RunReport) -> list[tuple[str, float, float, dict]]:
    """The launching process's phases back to back from its start (empty without a process record)."""
    from ..timeline import PROCESS_PHASE_LABELS

    p = report.process or {}
    phases, begin = p.get("phases") or {}, p.get("t_begin")
    if not phases or not begin:
        return []
    out, cursor = [], float(begin)
    order = [k for k in TRACE_PROCESS_ORDER if k in phases] + [k for k in phases if k not in TRACE_PROCESS_ORDER]
    for k in order:
        dur = float(phases[k])
        if dur > _EPS:
            out.append((PROCESS_PHASE_LABELS.get(k, k), cursor, dur, {"level": "process", "phase": k}))
            cursor += dur
    return out


def _startup_slice(w, report: RunReport) -> list[tuple[str, float, float, dict]]:
    """A worker's start-up, from its process's start to ready (clipped to the run's start)."""
    if not (w.t_start > _EPS and w.t_ready > 0):
        return []
    start, end = w.t_ready - w.t_start, w.t_ready
    begin = (report.process or {}).get("t_begin")
    if begin:
        start = max(start, float(begin))
    return [("start-up", start, end - start, {"level": "worker", "t_start": w.t_start})] if end - start > _EPS else []


def _worker_slices(tasks: list[TaskTiming], worker_extra: dict[str, float],
                   startup: list | None = None) -> list[tuple[str, float, float, dict]]:
    """(name, start s, duration s, args) for one worker, on one absolute clock, non-overlapping."""
    out: list[tuple[str, float, float, dict]] = list(startup or [])
    tasks = sorted(tasks, key=lambda t: (t.t_begin, t.task))
    first = tasks[0].t_begin if tasks else (out[-1][1] + out[-1][2] if out else 0.0)
    pre = worker_extra.get("t_init_top", 0.0)
    cursor = first - pre
    if out:
        cursor = max(cursor, out[-1][1] + out[-1][2])
    if pre > _EPS:
        out.append(("init_top", cursor, pre, {"level": "worker"}))
    for t in tasks:
        cursor = max(cursor, t.t_begin)
        args = {"task": t.task, "frames": [t.start, t.stop], "bytes_read": t.bytes_read}
        for p in PHASES:
            dur = float(getattr(t, p))
            if dur > 0:
                out.append((p.removeprefix("t_"), cursor, dur, args))
                cursor += dur
        cursor = max(cursor, t.t_end)
    for p in ("t_wait", "t_comm"):
        dur = worker_extra.get(p, 0.0)
        if dur > _EPS:
            out.append((p.removeprefix("t_"), cursor, dur, {"level": "worker"}))
            cursor += dur
    return out


def _scheduler_slices(tasks: list[TaskTiming]) -> list[tuple[str, float, float, dict]]:
    out = []
    cursor = None
    for t in sorted((t for t in tasks if t.t_sched_start is not None and t.t_sched_stop is not None),
                    key=lambda t: t.t_sched_start):
        start = t.t_sched_start if cursor is None else max(t.t_sched_start, cursor)
        stop = max(start, t.t_sched_stop)
        out.append(("scheduler", start, stop - start, {"task": t.task, "frames": [t.start, t.stop]}))
        cursor = stop
    return out


def build_trace(reports: RunReport | Sequence[RunReport], labels: Sequence[str] | None = None) -> dict:
    """The trace-event dict; several reports get separate process ids, each from time 0, named by ``labels``."""
    if isinstance(reports, RunReport):
        reports = [reports]
    events: list[dict] = []
    pid = 0
    for i, report in enumerate(reports):
        label = labels[i] if labels else (f"N={report.n_workers}" if len(reports) > 1 else "")
        tracks = []
        proc = _process_slices(report)
        if proc:
            tracks.append((None, proc, []))
        for w in worker_timings(report):
            mine = [t for t in report.tasks if t.worker == w.worker]
            extra = {p: max(0.0, getattr(w, p) - sum(getattr(t, p) for t in mine))
                     for p in ("t_init_top", "t_wait", "t_comm")}
            tracks.append((w, _worker_slices(mine, extra, _startup_slice(w, report)), _scheduler_slices(mine)))
        starts = [s[1] for _, a, b in tracks for s in (*a, *b)]
        origin = min(starts) if starts else 0.0
        for w, slices, sched in tracks:
            pid += 1
            if w is None:
                who = f"launching process (pid {(report.process or {}).get('pid', '?')})"
                name = f"{label} {who}".strip()
            else:
                name = f"{label} {w.worker}".strip() + (f" ({w.host})" if w.host else "")
            events.append({"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                           "args": {"name": name}})
            events.append({"name": "process_sort_index", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                           "args": {"sort_index": pid}})
            events.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                           "args": {"name": "tasks" if w is not None else "phases"}})
            if sched:
                events.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": 1,
                               "args": {"name": "scheduler"}})
            for tid, rows in ((0, slices), (1, sched)):
                for sname, start, dur, args in rows:
                    ts = round((start - origin) * _US, 3)
                    te = round((start + dur - origin) * _US, 3)
                    events.append({"name": sname, "cat": "phase" if tid == 0 else "scheduler", "ph": "X",
                                   "ts": ts, "dur": round(te - ts, 3), "pid": pid, "tid": tid, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(report: RunReport | Sequence[RunReport], path: str | os.PathLike,
                labels: Sequence[str] | None = None) -> dict:
    """Write the Chrome/Perfetto trace of one report (or several) to ``path`` atomically; returns the trace dict."""
    from ..util import atomic_output

    trace = build_trace(report, labels)
    with atomic_output(path) as tmp:
        Path(tmp).write_text(json.dumps(trace))
    return trace


__all__ = ["build_trace", "write_trace"]
