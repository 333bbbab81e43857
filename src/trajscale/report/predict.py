"""Predict the same run at N ranks from one run's own report (``trajscale report --predict``).

The model (equations and assumptions: docs/benchmarks.md, "Predicting a run at N ranks")
is fitted from what the report measured and nothing else, unless the user says more
about the target machine (``storage_gbps``, ``metadata_ms``, ``nodes`` x ``cores_per_node``).

For N ranks and T(N) tasks (the run's own task count if it was fixed with ``--tasks``,
else ``tasks_per_worker`` x N as ``trajscale run`` plans them, capped by the chunks or
parts tasks may start on), each rank runs ``q = ceil(T/N)`` tasks of ``F/T`` frames and
``B/T`` bytes, and::

    t_read(N)  = q B/T / min(r_io / o(N), B_s / N_a)       r_io: one rank's measured read rate
    t_comp(N)  = q F/T x c_f x o(N)                        c_f: compute seconds per frame
    t_meta(N)  = f(N) x t_open         (local: measured)   f(N): files a rank opens
               = N_a x f(N) x M        (--metadata-ms M: one metadata server, one open at a time)
    t_comm(N)  = alpha x ceil(log2 N) + job bytes / bw_net x ceil(log2 N)   (broadcast, gather)
    t_wall(N)  = fixed + start(N) + max over (median rank, straggler) [t_meta + t_read + t_comp] + t_comm(N)

``o(N) = max(1, N / (nodes x cores_per_node))`` is oversubscription, ``N_a = min(N, T)``
the ranks with work.  A straggler seen in the report (a rank whose read or compute rate,
or start-up, exceeded 1.5 x the median) is assumed to be present in the larger run too.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from statistics import median

from .metrics import json_safe, worker_timings
from .stragglers import STRAGGLER_FACTOR, startup_in_run
from .timing import RunReport

#: E(N) below this is where a run stops being worth its ranks.
EFFICIENCY_LIMIT = 0.7
#: ``trajscale run``'s default tasks per worker (run(tasks_per_worker=4)).
TASKS_PER_WORKER = 4
#: Assumed when the report measured no file open (a serial run opens the file while preparing).
DEFAULT_OPEN_S = 0.02
#: Latency of one stage of a tree broadcast/gather when the report measured none (one node: shared memory).
DEFAULT_ALPHA_S = 1e-4
#: Network bandwidth for the job's broadcast, bytes/s.
NET_BYTES_PER_S = 1e9
#: Starting the parallel part when the report did not measure it (its executor was another):
#: a process pool (forkserver, workers forked while the launcher prepares), MPI init, a Dask LocalCluster.
#: (processes: the pool's phase measured 0.13-0.17 s on the 2-core test machine, plus about 0.15 s of
#: dispatching tasks and the workers' first reads beyond their timed work.)
DEFAULT_LAUNCH_S = {"processes": 0.3, "mpi": 0.2, "dask": 2.0}
#: The forkserver's start-up as a share of the launcher's imports phase, counted when the launcher,
#: the forkserver and N workers may not each have a core (no --cores-per-node, or fewer than N + 2):
#: on the loaded 2-core VM the processes(2) run's whole wall exceeded the serial one's by 0.3-1.3 s.
POOL_IMPORT_SHARE = 0.5
#: Largest N scanned for the efficiency threshold.
MAX_SCAN_N = 2**20

LIMITS = ("storage bandwidth", "metadata", "compute", "read I/O", "start-up", "communication",
          "too few tasks or chunks")


@dataclass(frozen=True, slots=True)
class Machine:
    """What the user says about the target machine (None: not given)."""

    storage_gbps: float | None = None    # aggregate bandwidth of the shared storage, GB/s
    metadata_ms: float | None = None     # one file open at the metadata server, served one at a time
    nodes: int | None = None
    cores_per_node: int | None = None

    @property
    def cores(self) -> int | None:
        if self.cores_per_node is None:
            return None
        return max(1, self.nodes or 1) * self.cores_per_node


@dataclass(frozen=True, slots=True)
class Model:
    """Per-unit costs fitted from one report."""

    executor: str
    frames: int
    bytes: int
    n_tasks: int
    tasks_fixed: bool         # the run asked for its task count (--tasks): it stays at larger N
    max_tasks: int            # chunks (or parts) tasks may start on: more tasks are impossible
    chunk_frames: int
    n_parts: int              # files the trajectory is split into (1: one file)
    read_s_per_byte: float    # one rank, median rate
    compute_s_per_frame: float
    open_s: float             # one file open, as measured (or assumed)
    startup_s: float          # one rank's start-up (median)
    fixed_s: float            # the launcher's serial phases (imports, MPI init, topology, prepare, reduce, write)
    imports_s: float          # of which the launcher's interpreter and imports
    launch_s: float           # starting the parallel part at N > 1: a pool (and joining it), or MPI's init
    pool_cpu_s: float         # of which a forkserver's own interpreter and imports, where cores are shared
    target: str               # the executor predicted: "mpi", "processes" or "dask"
    alpha_s: float            # one stage of a tree collective
    job_bytes: int            # the prepared job broadcast to every rank
    # A straggler seen in the report, assumed present at every N: factors on its rates, excess start-up.
    slow_read: float = 1.0
    slow_compute: float = 1.0
    slow_startup_s: float = 0.0
    straggler: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Prediction:
    """The model's answer for N ranks."""

    n: int
    t_wall: float
    speedup: float
    efficiency: float
    limit: str
    n_tasks: int = 0
    files_per_rank: int = 0
    terms: dict = field(default_factory=dict)   # seconds of each term at this N

    def to_dict(self) -> dict:
        return json_safe(asdict(self))


def _chunk_frames(report: RunReport) -> int:
    chunks = (report.source or {}).get("chunks")
    if isinstance(chunks, list | tuple) and chunks and isinstance(chunks[0], int):
        return max(1, int(chunks[0]))
    return 1


def fit(report: RunReport, target: str | None = None) -> Model:
    """The model's per-unit costs from one report (any executor, any N).

    ``target`` is the executor predicted (default: the report's own, or ``"mpi"`` for a serial report).
    """
    target = target or (report.executor if report.executor in DEFAULT_LAUNCH_S else "mpi")
    workers = worker_timings(report)
    tasks = list(report.tasks)
    frames = sum(t.frames for t in tasks) or report.n_frames
    nbytes = sum(t.bytes_read for t in tasks)
    notes = []
    # Per-rank rates, from the ranks that worked; the median rank is the model's rank.
    busy = [w for w in workers if w.frames > 0]
    read_rates = [w.t_io / w.bytes_read for w in busy if w.bytes_read > 0]
    comp_rates = [w.t_compute / w.frames for w in busy]
    s_per_byte = median(read_rates) if read_rates else 0.0
    s_per_frame = median(comp_rates) if comp_rates else 0.0
    opens = sum(t.files_opened for t in tasks)
    t_open = sum(w.t_init_traj for w in workers)
    n_open_events = opens or sum(1 for w in workers if w.t_init_traj > 0)
    if n_open_events and t_open > 0:
        open_s = t_open / n_open_events
    else:
        open_s = DEFAULT_OPEN_S
        notes.append(f"no file open was timed: {DEFAULT_OPEN_S * 1e3:.0f} ms per open assumed")
    starts = [startup_in_run(w, report) for w in workers]
    proc = report.process or {}
    phases = dict(proc.get("phases") or {})
    imports = float(phases.get("imports", 0.0))
    startup = median(starts) if starts else imports
    if phases:
        fixed = sum(float(phases.get(p, 0.0)) for p in ("imports", "topology", "prepare", "reduce", "write"))
    else:
        fixed = report.t_prepare + report.t_reduce
        notes.append("the report has no process record (older trajscale): start-up not counted")
    launch_phase = {"mpi": "mpi_init", "processes": "pool_start", "dask": "pool_start"}[target]
    if report.executor == target and phases.get(launch_phase):
        launch = float(phases[launch_phase])
        pool_cpu = 0.0
    else:
        # A process pool's forkserver is a fresh interpreter importing trajscale: where the cores are
        # busy it does not overlap the launcher's preparation (see POOL_IMPORT_SHARE).
        pool_cpu = POOL_IMPORT_SHARE * imports if target == "processes" else 0.0
        launch = DEFAULT_LAUNCH_S[target] + pool_cpu
        notes.append(f"starting {target} not measured in this {report.executor} run: {launch:.2g} s assumed")
    comms = [w.t_comm for w in workers if w.t_comm > 0]
    stages = math.ceil(math.log2(max(2, len(workers))))
    if comms and len(workers) > 1:
        alpha = median(comms) / stages
    else:
        alpha = DEFAULT_ALPHA_S
        notes.append(f"no communication measured (one rank, or no collectives): {DEFAULT_ALPHA_S * 1e6:.0f} us "
                     "per collective stage assumed")
    src = report.source or {}
    n_parts = int(src.get("n_segments") or 1)
    cf = _chunk_frames(report)
    max_tasks = n_parts if n_parts > 1 and frames / n_parts >= cf else max(1, math.ceil(frames / cf))
    max_tasks = max(max_tasks, len(tasks))
    n_sel = max(1, int(report.n_atoms or 1))
    model = Model(
        executor=report.executor, frames=frames, bytes=nbytes, n_tasks=max(1, len(tasks)),
        tasks_fixed=bool((report.meta or {}).get("n_tasks_asked")), max_tasks=max_tasks, chunk_frames=cf,
        n_parts=n_parts, read_s_per_byte=s_per_byte, compute_s_per_frame=s_per_frame, open_s=open_s,
        startup_s=startup, fixed_s=fixed, imports_s=imports, launch_s=launch, pool_cpu_s=pool_cpu, target=target,
        alpha_s=alpha, job_bytes=20 * n_sel,
        notes=tuple(notes))
    return _with_straggler(model, report, busy, read_rates, comp_rates, starts)


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


def n_tasks_at(model: Model, n: int) -> int:
    """Tasks a run at N ranks would have: fixed if the run fixed them, else 4 per rank, capped by chunks/parts."""
    if n == 1 and not model.tasks_fixed:
        return 1
    t = model.n_tasks if model.tasks_fixed else TASKS_PER_WORKER * n
    return max(1, min(t, model.max_tasks))


def files_per_rank(model: Model, n: int, tasks: int) -> int:
    """Trajectory files one rank opens: 1 for one file; for parts, those its contiguous tasks span."""
    if model.n_parts <= 1:
        return 1
    q = math.ceil(tasks / n)
    share = q * model.frames / tasks
    return max(1, min(model.n_parts, math.ceil(share / (model.frames / model.n_parts))
                      + (0 if tasks % model.n_parts == 0 else 1)))


def terms_at(model: Model, n: int, machine: Machine = Machine()) -> dict[str, float]:
    """Seconds of each term of t_wall(N) (module docstring)."""
    tasks = n_tasks_at(model, n)
    active = min(n, tasks)
    q = math.ceil(tasks / n)
    over = max(1.0, n / machine.cores) if machine.cores else 1.0
    bytes_rank = q * model.bytes / tasks
    frames_rank = q * model.frames / tasks
    rate = 1 / model.read_s_per_byte / over if model.read_s_per_byte > 0 else math.inf
    storage = machine.storage_gbps * 1e9 / active if machine.storage_gbps else math.inf
    read = bytes_rank / min(rate, storage) if bytes_rank else 0.0
    read_unbound = bytes_rank / rate if bytes_rank and rate < math.inf else 0.0
    comp = frames_rank * model.compute_s_per_frame * over
    files = files_per_rank(model, n, tasks)
    if n == 1:
        meta = 0.0   # one process: the file the preparation opened is the one its tasks read
    elif machine.metadata_ms is not None:
        meta = active * files * machine.metadata_ms / 1e3
    else:
        meta = files * model.open_s
    # The straggler's rank does the same share at its own rates; the wall waits for the slower.
    slow_read = (read_unbound * model.slow_read if machine.storage_gbps is None
                 else max(read, read_unbound * model.slow_read))
    work = meta + read + comp
    if n > 1:   # one rank alone is the model's median rank: the straggler is one among several
        work = max(work, meta + slow_read + comp * model.slow_compute)
    stages = math.ceil(math.log2(n)) if n > 1 else 0
    comm = stages * (model.alpha_s + model.job_bytes / NET_BYTES_PER_S)
    startup = model.slow_startup_s if n > 1 else 0.0
    launch = model.launch_s if n > 1 else 0.0
    if n > 1 and machine.cores and n + 2 <= machine.cores:
        launch -= model.pool_cpu_s   # cores to spare: the forkserver starts beside the launcher's preparation
    ideal_io = model.bytes / rate / n if rate < math.inf else 0.0
    return {"fixed": model.fixed_s, "start-up": startup + launch, "metadata": meta, "read": read, "compute": comp,
            "straggler": work - (meta + read + comp), "communication": comm, "work": work,
            "tasks": float(tasks), "files": float(files), "storage_excess": read - read_unbound,
            "granularity": (q - tasks / n) * (model.bytes / tasks / rate if rate < math.inf else 0.0)
            + (q - tasks / n) * model.frames / tasks * model.compute_s_per_frame * over,
            "ideal_io": ideal_io}


def wall_at(model: Model, n: int, machine: Machine = Machine()) -> float:
    """Predicted wall time (s) at ``n`` ranks: :func:`terms_at`'s fixed, start-up, work and communication terms."""
    t = terms_at(model, n, machine)
    return t["fixed"] + t["start-up"] + t["work"] + t["communication"]


def _limit(model: Model, n: int, machine: Machine, t: dict[str, float]) -> str:
    """The resource that holds the run back at N: the largest loss against perfect scaling."""
    w1 = wall_at(model, 1, machine)
    t1 = terms_at(model, 1, machine)
    losses = {
        "start-up": t["fixed"] + t["start-up"] - (t1["fixed"] + t1["start-up"]) / n + t["straggler"],
        "metadata": t["metadata"] - t1["metadata"] / n,
        "storage bandwidth": t["storage_excess"],
        "communication": t["communication"],
        "too few tasks or chunks": t["granularity"],
    }
    if model.straggler and t["straggler"] > 0:
        cause = "start-up" if model.slow_startup_s else ("read I/O" if model.slow_read > 1 else "compute")
        losses["start-up"] -= t["straggler"]
        losses[f"straggler: {cause}"] = t["straggler"] + (model.slow_startup_s if n > 1 else 0.0)
        if model.slow_startup_s:
            losses["start-up"] -= model.slow_startup_s
    worst = max(losses, key=losses.get)
    if losses[worst] > 0.1 * w1 / n and losses[worst] > 0.1 * wall_at(model, n, machine):
        return worst
    return "read I/O" if t["read"] > t["compute"] else "compute"


def fit_reports(reports: list[RunReport], target: str | None = None) -> Model:
    """Fit from the smallest run, taking what only a parallel run measures from a larger one of the
    predicted executor (its launch phase and collective latency): ``report 1.json 2.json --predict 16``."""
    ordered = sorted(reports, key=lambda r: r.n_workers)
    model = fit(ordered[0], target)
    phase = {"mpi": "mpi_init", "processes": "pool_start", "dask": "pool_start"}[model.target]
    for other in ordered[1:]:
        if other.executor != model.target or other.n_workers < 2:
            continue
        got = fit(other, model.target)
        launch = float(((other.process or {}).get("phases") or {}).get(phase, 0.0))
        notes = [n for n in model.notes if not n.startswith(("starting", "no communication"))]
        model = replace(model, launch_s=launch or model.launch_s, pool_cpu_s=0.0 if launch else model.pool_cpu_s,
                        alpha_s=got.alpha_s if any(w.t_comm > 0 for w in worker_timings(other)) else model.alpha_s,
                        notes=(*notes, f"launch and communication from the {other.n_workers}-rank run"))
    return model


def predict(report: RunReport, ns: list[int], machine: Machine = Machine(),
            target: str | None = None) -> list[Prediction]:
    """Wall time, S(N), E(N) and the limit at each N (S and E against the model's own N = 1)."""
    model = fit(report, target)
    return predict_model(model, ns, machine)


def predict_model(model: Model, ns: list[int], machine: Machine = Machine()) -> list[Prediction]:
    """The :class:`Prediction` at each N of ``ns`` from a fitted model (S and E against its own N = 1)."""
    w1 = wall_at(model, 1, machine)
    out = []
    for n in ns:
        t = terms_at(model, n, machine)
        w = wall_at(model, n, machine)
        s = w1 / w if w > 0 else math.nan
        out.append(Prediction(n, w, s, s / n, _limit(model, n, machine, t), int(t["tasks"]), int(t["files"]),
                              {k: v for k, v in t.items() if k not in ("tasks", "files")}))
    return out


def efficiency_threshold(model: Model, machine: Machine = Machine(), limit: float = EFFICIENCY_LIMIT) -> int | None:
    """The smallest N at which E(N) < ``limit`` (None if not below ``MAX_SCAN_N``)."""
    w1 = wall_at(model, 1, machine)

    def eff(n: int) -> float:
        return w1 / wall_at(model, n, machine) / n

    lo, hi = 1, 2
    while eff(hi) >= limit:
        lo, hi = hi, hi * 2
        if hi > MAX_SCAN_N:
            return None
    while hi - lo > 1:   # E falls with N in this model: bisect between powers of two
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if eff(mid) >= limit else (lo, mid)
    return hi


def levers(model: Model, machine: Machine = Machine()) -> list[tuple[str, int | None]]:
    """What would move the N at which E falls below 0.7: the same model with one thing changed."""
    out = []
    if model.tasks_fixed:
        out.append(("task count: `--tasks` unset (4 tasks per rank)",
                    efficiency_threshold(replace(model, tasks_fixed=False), machine)))
    if model.chunk_frames > 1 and model.n_parts <= 1:
        out.append((f"layout: chunks of 1 frame instead of {model.chunk_frames} (`trajscale rechunk`)",
                    efficiency_threshold(replace(model, max_tasks=max(model.frames, model.n_tasks), chunk_frames=1),
                                         machine)))
    if model.n_parts > 1:
        out.append(("fewer files per rank: one file instead of parts", efficiency_threshold(
            replace(model, n_parts=1), machine)))
    if model.straggler:
        out.append(("no straggler", efficiency_threshold(
            replace(model, slow_read=1.0, slow_compute=1.0, slow_startup_s=0.0, straggler=""), machine)))
    out.append(("10x the frames per run (a longer trajectory, or several analyses in one run)",
                efficiency_threshold(replace(model, frames=model.frames * 10, bytes=model.bytes * 10), machine)))
    out.append(("start-up and preparation halved", efficiency_threshold(
        replace(model, fixed_s=model.fixed_s / 2, startup_s=model.startup_s / 2,
                imports_s=model.imports_s / 2), machine)))
    return out


def format_predictions(model: Model, preds: list[Prediction], machine: Machine = Machine()) -> str:
    """The prediction as a table, with the efficiency threshold and what would move it."""
    lines = [f"prediction of {model.target} runs from a {model.executor} run: {model.frames} frames, "
             f"{model.bytes / 1e9:.3g} GB read, "
             f"{model.n_tasks} tasks (at most {model.max_tasks}: chunks of {model.chunk_frames} frames"
             + (f", {model.n_parts} parts" if model.n_parts > 1 else "") + ")",
             (f"  per rank: read {1e-9 / model.read_s_per_byte if model.read_s_per_byte else math.inf:.3g} GB/s, "
             f"compute {model.compute_s_per_frame * 1e3:.3g} ms/frame, open {model.open_s * 1e3:.3g} ms/file, "
             f"start-up {model.startup_s:.3g} s; serial phases {model.fixed_s:.3g} s")]
    if model.straggler:
        lines.append(f"  straggler assumed at every N: {model.straggler}")
    lines += [f"  note: {n}" for n in model.notes]
    lines.append(f"{'N':>8} {'wall s':>10} {'S(N)':>8} {'E(N)':>6} {'tasks':>7} {'files/rank':>10}  limit")
    for p in preds:
        lines.append(f"{p.n:>8} {p.t_wall:>10.4g} {p.speedup:>8.3g} {p.efficiency:>6.2f} {p.n_tasks:>7} "
                     f"{p.files_per_rank:>10}  {p.limit}")
    n07 = efficiency_threshold(model, machine)
    if n07 is None:
        lines.append(f"E(N) stays at or above {EFFICIENCY_LIMIT} up to N = {MAX_SCAN_N}")
    else:
        t = terms_at(model, n07, machine)
        lines.append(f"E(N) falls below {EFFICIENCY_LIMIT} at N = {n07} "
                     f"(limit there: {_limit(model, n07, machine, t)})")
        still = []
        for what, n in levers(model, machine):
            if n == n07:
                still.append(what.split(":")[0].split(" (")[0])
            else:
                lines.append(f"  with {what}: " + (f"at N = {n}" if n is not None else f"not below N = {MAX_SCAN_N}"))
        if still:
            lines.append(f"  unchanged with: {'; '.join(still)}")
    return "\n".join(lines)


__all__ = ["EFFICIENCY_LIMIT", "Machine", "Model", "Prediction", "efficiency_threshold", "fit", "fit_reports",
           "format_predictions", "levers", "predict", "predict_model", "terms_at", "wall_at"]
