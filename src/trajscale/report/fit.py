"""The model's per-unit costs, fitted from one run's report (:func:`fit`) or from several at different N
(:func:`fit_reports`, which sees per-worker costs that grow with N); :mod:`.predict` turns them into wall times."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import median

from ..executor_registry import DEFAULT_PREDICTION, EXECUTORS, predicted_traits
from .conditions import RunConditions, busy_reasons
from .machine import Machine, this_machine
from .metrics import worker_timings
from .payload import Payload
from .stragglers import STRAGGLER_FACTOR, startup_in_run
from .timing import RunReport

#: Assumed when the report measured no file open (a serial run opens the file while preparing).
DEFAULT_OPEN_S = 0.02
#: Latency of one stage of a tree broadcast/gather when the report measured none (one node: shared memory).
DEFAULT_ALPHA_S = 1e-4


@dataclass(frozen=True, slots=True)
class Model:
    """Per-unit costs fitted from one report, or from several of the same work at different N."""

    executor: str
    frames: int
    bytes: int
    atoms: int                # the analysis's selected atoms
    n_tasks: int
    tasks_fixed: bool         # the run asked for its task count (--tasks): it stays at larger N
    max_tasks: int            # chunks and parts tasks may start on: more tasks are impossible
    chunk_frames: int
    n_parts: int              # files the trajectory is split into (1: one file)
    read_s_per_byte: float    # one rank on a core of its own, median rate
    compute_s_per_frame: float
    open_s: float             # one file open, as measured (or assumed)
    startup_s: float          # one rank's start-up (median)
    fixed_s: float            # the launcher's serial phases (imports, MPI init, topology, prepare, reduce, write)
    imports_s: float          # of which the launcher's interpreter and imports
    target: str               # the executor predicted (one whose traits are ``predicted``)
    alpha_s: float            # one stage of a tree collective
    job_bytes: int            # the prepared job, pickled: sent to every worker (a pool: with every task)
    launch_s: float | None = None   # the target's launch phase as a report of it measured (None: not measured)
    # The reduced partial result, pickled, over ``frames`` frames; per_frame: a task's partial is its frames' share.
    partial_bytes: int = 0
    partial_per_frame: bool = True
    payload_measured: bool = False   # the sizes above were measured by the run (else assumed)
    collective_open: bool = False   # under MPI every rank opens the one file collectively (MPI-IO H5MD)
    # Per-worker costs that grow with the workers (several reports): s/frame and s/byte per extra worker.
    compute_growth: float = 0.0
    read_growth: float = 0.0
    # The spread of the inputs: factors on the per-unit costs at the range's two ends.
    compute_spread: tuple[float, float] = (1.0, 1.0)
    read_spread: tuple[float, float] = (1.0, 1.0)
    # A straggler seen in the report, assumed present at every N: factors on its rates, excess start-up.
    slow_read: float = 1.0
    slow_compute: float = 1.0
    slow_startup_s: float = 0.0
    straggler: str = ""
    fitted_from: tuple[int, ...] = (1,)   # the worker counts of the reports fitted
    notes: tuple[str, ...] = ()
    # The report's run's conditions: its files' page-cache share (None: not recorded), size, host, and why busy.
    page_cache: float | None = None
    file_bytes: int = 0
    host: str = ""
    busy: str = ""
    #: How the storage meets the reads (report/storage.py): "capped": read_s_per_byte is the whole read,
    #: which the storage's rate per reader may cap; "apart": it is a rank's own cost per byte, and the
    #: storage adds its time to deliver the bytes; "none": the reads come from the page cache.
    storage_reads: str = "capped"


def _chunk_frames(report: RunReport) -> int:
    chunks = report.source.chunks
    return max(1, chunks[0]) if chunks else 1


def oversubscription(n: int, machine: Machine) -> float:
    """Workers per core: ``max(1, N / cores)``; beyond the cores, workers share them."""
    return max(1.0, n / machine.cores)


def _quartile_spread(values: list[float]) -> tuple[float, float]:
    """(lower, upper) quartile over the median of ``values``: the spread of a per-unit cost."""
    vals = sorted(v for v in values if v > 0)
    if len(vals) < 2:
        return (1.0, 1.0)
    mid = median(vals)
    k = len(vals) - 1
    return (vals[round(0.25 * k)] / mid, vals[round(0.75 * k)] / mid)


def fit(report: RunReport, target: str | None = None, ran_on: Machine | None = None) -> Model:
    """The model's per-unit costs from one report (any executor, any N) for the executor ``target`` (default: the
    report's own, or :data:`~trajscale.executor_registry.DEFAULT_PREDICTION`), undoing an oversubscription of
    ``ran_on``'s cores."""
    ran_on = ran_on or this_machine()
    own = EXECUTORS.get(report.executor)
    target = target or (report.executor if own is not None and own.predicted else DEFAULT_PREDICTION)
    launch_phase = predicted_traits(target).launch_phase
    workers = worker_timings(report)
    tasks = list(report.tasks)
    frames = sum(t.frames for t in tasks) or report.n_frames
    nbytes = sum(t.bytes_read for t in tasks)
    notes = []
    over = oversubscription(max(1, report.n_workers), ran_on)
    # Per-rank rates, from the ranks that worked; the median rank is the model's rank.
    busy = [w for w in workers if w.frames > 0]
    read_rates = [w.t_io / w.bytes_read for w in busy if w.bytes_read > 0]
    comp_rates = [w.t_compute / w.frames for w in busy]
    s_per_byte = median(read_rates) / over if read_rates else 0.0
    s_per_frame = median(comp_rates) / over if comp_rates else 0.0
    comp_spread = _quartile_spread([t.t_compute / t.frames for t in tasks if t.frames])
    read_spread = _quartile_spread([t.t_io / t.bytes_read for t in tasks if t.bytes_read])
    open_s = _open_s(tasks, workers, notes)
    starts = [startup_in_run(w, report) for w in workers]
    imports, fixed, launch = _phases(report, target, launch_phase, notes)
    startup = median(starts) if starts else imports
    alpha = _alpha(workers, notes)
    n_parts = report.source.n_segments or 1
    cf = _chunk_frames(report)
    # Tasks start on chunk boundaries and part starts (planning.plan_in_parts).
    max_tasks = max(n_parts, math.ceil(frames / cf), len(tasks))
    n_sel = max(1, int(report.n_atoms or 1))
    payload = report.meta.payload
    measured_payload = payload is not None
    if payload is None:
        notes.append("the report has no pickled sizes (an older trajscale, or a result pickle cannot take): "
                     "a job of 20 bytes per atom and no partial results assumed")
        payload = Payload(20 * n_sel, 0, frames, True)
    # whether MPI ranks open the file together (an older report: an H5MD group's layout, the one format opened so)
    said = report.source.collective_open
    collective = said if said is not None else report.source.has_chunk_layout
    model = Model(
        executor=report.executor, frames=frames, bytes=nbytes, atoms=n_sel, n_tasks=max(1, len(tasks)),
        tasks_fixed=bool(report.meta.n_tasks_asked), max_tasks=max_tasks, chunk_frames=cf,
        n_parts=n_parts, read_s_per_byte=s_per_byte, compute_s_per_frame=s_per_frame, open_s=open_s,
        startup_s=startup, fixed_s=fixed, imports_s=imports, target=target, alpha_s=alpha,
        job_bytes=payload.job_bytes, partial_bytes=payload.partial_bytes, partial_per_frame=payload.per_frame,
        payload_measured=measured_payload,
        launch_s=launch, collective_open=collective, compute_spread=comp_spread,
        read_spread=read_spread, fitted_from=(max(1, report.n_workers),), notes=tuple(notes),
        **_conditions(report))
    return _with_straggler(model, report, busy, read_rates, comp_rates, starts)


def _phases(report: RunReport, target: str, launch_phase: str, notes: list[str]) -> tuple[float, float, float | None]:
    """The launcher's imports, its serial phases, and the target's launch phase where measured (else None)."""
    phases = dict((report.process or {}).get("phases") or {})
    imports = float(phases.get("imports", 0.0))
    if phases:
        fixed = sum(float(phases.get(p, 0.0)) for p in ("imports", "topology", "prepare", "reduce", "report", "write"))
    else:
        fixed = report.t_prepare + report.t_reduce
        notes.append("the report has no process record (older trajscale): start-up not counted")
    launch = None
    if report.executor == target and report.n_workers > 1 and phases.get(launch_phase):
        launch = float(phases[launch_phase])
    return imports, fixed, launch


def _open_s(tasks, workers, notes: list[str]) -> float:
    """One file open: the opens timed over those made (:data:`DEFAULT_OPEN_S` where none was timed)."""
    opens = sum(t.files_opened for t in tasks)
    t_open = sum(w.t_init_traj for w in workers)
    n_open_events = opens or sum(1 for w in workers if w.t_init_traj > 0)
    if n_open_events and t_open > 0:
        return t_open / n_open_events
    notes.append(f"no file open was timed: {DEFAULT_OPEN_S * 1e3:.0f} ms per open assumed")
    return DEFAULT_OPEN_S


def _alpha(workers, notes: list[str]) -> float:
    """One stage of a tree collective: the median rank's communication over the stages."""
    comms = [w.t_comm for w in workers if w.t_comm > 0]
    if comms and len(workers) > 1:
        return median(comms) / math.ceil(math.log2(max(2, len(workers))))
    notes.append(f"no communication measured (one rank, or no collectives): {DEFAULT_ALPHA_S * 1e6:.0f} us "
                 "per collective stage assumed")
    return DEFAULT_ALPHA_S


def _conditions(report: RunReport) -> dict:
    """The model's fields from the report's conditions (page-cache share, size, host, why busy)."""
    conds = RunConditions.from_dict(report.conditions)
    cache = conds.page_cache
    return {"page_cache": cache.resident if cache else None,
            "file_bytes": cache.bytes if cache else int(report.source.file_bytes or 0),
            "host": str((report.process or {}).get("host") or ""), "busy": busy_reasons([conds.load])}


def _with_straggler(model: Model, report: RunReport, busy, read_rates, comp_rates, starts) -> Model:
    """The slowest rank's factors, if it is a straggler (> 1.5 x the median) in its reads, compute or start-up."""
    if len(busy) < 2:
        return model
    best = None
    r_med, c_med = median(read_rates) if read_rates else 0.0, median(comp_rates)
    for w in busy:
        k_r = (w.t_io / w.bytes_read) / r_med if r_med > 0 and w.bytes_read else 1.0
        k_c = (w.t_compute / w.frames) / c_med if c_med > 0 else 1.0
        # Excess seconds this rank lost in each: the largest names it.
        ex = {"read I/O": (k_r - 1) * r_med * w.bytes_read, "compute": (k_c - 1) * c_med * w.frames}
        cause = max(ex, key=ex.get)
        k = k_r if cause == "read I/O" else k_c
        if k > STRAGGLER_FACTOR and (best is None or ex[cause] > best[2]):
            best = (w.worker, cause, ex[cause], k_r, k_c)
    s_med = median(starts)
    slow_start = max(starts) - s_med if starts else 0.0
    names = [w.worker for w in worker_timings(report)]
    if s_med > 0 and max(starts) > STRAGGLER_FACTOR * s_med and (best is None or slow_start > best[2]):
        who = names[starts.index(max(starts))]
        return replace(model, slow_startup_s=slow_start, straggler=f"{who} (start-up, +{slow_start:.2g} s)")
    if best is None:
        return model
    who, cause, _excess, k_r, k_c = best
    return replace(model, slow_read=max(1.0, k_r) if cause == "read I/O" else 1.0,
                   slow_compute=max(1.0, k_c) if cause == "compute" else 1.0,
                   straggler=f"{who} ({cause}, {k_r if cause == 'read I/O' else k_c:.2g}x the median rate)")


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y against x; slope 0 with fewer than two distinct x."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return (median(y for _, y in points), 0.0)
    mx = sum(xs) / len(xs)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return (my - slope * mx, slope)


def fit_reports(reports: list[RunReport], target: str | None = None, ran_on: Machine | None = None) -> Model:
    """Fit several reports of the same work at different worker counts together: a line through their per-rank costs
    against N gives each cost and its growth per further worker (clamped at none: a cost that falls with N is noise),
    their spread widens the prediction's range, the smallest run gives the serial phases, and a run of the predicted
    executor on 2 or more workers its launch and collective latency."""
    ran_on = ran_on or this_machine()
    ordered = sorted(reports, key=lambda r: r.n_workers)
    fits = [fit(r, target, ran_on) for r in ordered]
    model = fits[0]
    if len(fits) == 1:
        return model
    ns = [max(1, r.n_workers) for r in ordered]
    notes = [x for x in model.notes if not x.startswith("no communication")]
    c0, cg = _line([(n, f.compute_s_per_frame) for n, f in zip(ns, fits, strict=False)])
    r0, rg = _line([(n, f.read_s_per_byte) for n, f in zip(ns, fits, strict=False)])
    cg, rg = max(0.0, cg), max(0.0, rg)
    c1, r1 = max(c0 + cg, 1e-300), max(r0 + rg, 0.0)

    def spread(vals: list[float], base: float, slope: float) -> tuple[float, float]:
        ratios = [v / (base + slope * (n - 1)) for n, v in zip(ns, vals, strict=False) if base + slope * (n - 1) > 0]
        return (min(ratios, default=1.0), max(ratios, default=1.0))

    comp_spread = spread([f.compute_s_per_frame for f in fits], c1, cg)
    read_spread = spread([f.read_s_per_byte for f in fits], r1, rg) if r1 > 0 else (1.0, 1.0)
    launch, alpha = model.launch_s, model.alpha_s
    for r, f in zip(ordered, fits, strict=False):
        if r.executor == model.target and r.n_workers > 1:
            launch = f.launch_s if f.launch_s is not None else launch
            if any(w.t_comm > 0 for w in worker_timings(r)):
                alpha = f.alpha_s
    notes.append(f"fitted from {len(fits)} reports at N = {', '.join(map(str, ns))}: per-worker compute "
                 f"{c1 * 1e3:.3g} ms/frame + {cg * 1e6:.3g} us/frame per further worker")
    return replace(model, compute_s_per_frame=c1, read_s_per_byte=r1, compute_growth=cg, read_growth=rg,
                   compute_spread=comp_spread, read_spread=read_spread, launch_s=launch, alpha_s=alpha,
                   fitted_from=tuple(ns), notes=tuple(notes),
                   busy="; ".join(f"N = {n}: {f.busy}" for n, f in zip(ns, fits, strict=True) if f.busy))


__all__ = ["DEFAULT_ALPHA_S", "DEFAULT_OPEN_S", "Model", "fit", "fit_reports", "oversubscription"]
