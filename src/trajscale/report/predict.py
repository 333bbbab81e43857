"""Predict the same run at N ranks from one run's own report (``trajscale report --predict``).

The model (equations and assumptions: docs/scaling.md) is fitted from the report(s) for a
:class:`~trajscale.report.machine.Machine`; a straggler seen in the report is assumed at every N."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from ..executor_registry import predicted_traits
from .fit import Model, fit, fit_reports, oversubscription
from .machine import DEFAULTED, MEASURED, Machine, this_machine
from .metrics import json_safe
from .timing import RunReport

#: E(N) below this is where a run stops being worth its ranks.
EFFICIENCY_LIMIT = 0.7
#: ``trajscale run``'s default tasks per worker (run(tasks_per_worker=4)).
TASKS_PER_WORKER = 4
#: A start-up cost that neither the reports nor the machine's profile measured is known only within
#: this factor either way (the prediction's range widens by it).
DEFAULT_START_FACTOR = 2.0
#: Largest N scanned for the efficiency threshold.
MAX_SCAN_N = 2**20


@dataclass(frozen=True, slots=True)
class Terms:
    """Seconds of each term of t_wall(N) (module docstring) at one N."""

    n: int
    fixed: float
    startup: float
    metadata: float
    read: float
    compute: float
    straggler: float
    communication: float
    work: float
    tasks: int
    files: int
    storage_excess: float     # read seconds above what the rank's own rate gives (the storage's share)
    oversubscription: float   # o(N): workers per core
    granularity: float        # idle work from (q - T/N) tasks
    ideal_io: float

    @property
    def total(self) -> float:
        return self.fixed + self.startup + self.work + self.communication

    def to_dict(self) -> dict:
        return json_safe(asdict(self))


@dataclass(frozen=True, slots=True)
class Prediction:
    """The model's answer for N ranks: the wall time, its range and the limiting resource."""

    n: int
    t_wall: float
    speedup: float
    efficiency: float
    limit: str
    n_tasks: int = 0
    files_per_rank: int = 0
    t_low: float = 0.0
    t_high: float = 0.0
    terms: Terms | None = None

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in ("n", "t_wall", "t_low", "t_high", "speedup", "efficiency", "limit",
                                           "n_tasks", "files_per_rank")}
        d["terms"] = self.terms.to_dict() if self.terms else {}
        return json_safe(d)


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


def started_workers(model: Model, n: int) -> int:
    """Workers a run at N starts: one per task up to N for a pool that starts them on demand, else N."""
    return min(n, n_tasks_at(model, n)) if predicted_traits(model.target).starts_on_demand else n


def bytes_moved(model: Model, n: int, tasks: int) -> float:
    """Pickled bytes the run at ``n`` workers and ``tasks`` tasks moves, by how the executor declares they move."""
    if n <= 1:
        return 0.0
    traits = predicted_traits(model.target)
    task_partial = model.partial_bytes / tasks if model.partial_per_frame else model.partial_bytes
    if traits.job_moves == traits.partials_move == "per_task":
        return tasks * (model.job_bytes + task_partial)
    jobs = {"none": 0, "per_task": tasks, "per_worker": min(n, tasks),
            "tree": math.ceil(math.log2(n))}[traits.job_moves]
    if traits.partials_move == "per_worker":   # one reduced partial per worker; per-frame rows once
        partials = model.partial_bytes if model.partial_per_frame else min(n, tasks) * model.partial_bytes
    else:
        partials = {"none": 0, "per_task": tasks * task_partial}[traits.partials_move]
    return jobs * model.job_bytes + partials


def move_at(model: Model, n: int, tasks: int, machine: Machine) -> float:
    """Seconds of moving :func:`bytes_moved`: the launcher's half alone, the workers' half side by side."""
    side_by_side = min(n, tasks, machine.cores)
    return bytes_moved(model, n, tasks) * machine.transfer_s * (0.5 + 0.5 / max(1, side_by_side))


def launch_at(model: Model, n: int, machine: Machine) -> tuple[float, str]:
    """Seconds of starting the parallel part at ``n`` workers, and where that number came from: the machine's calibrated
    :class:`~trajscale.report.machine.LaunchLine` (its ``at_cores`` replaced by a report of the executor on 2 or more
    workers), else one fresh worker's start as the executor's ``launch`` trait says."""
    if n <= 1:
        return 0.0, ""
    beyond = max(0, started_workers(model, n) - machine.cores) / machine.cores
    traits = predicted_traits(model.target)
    line = machine.launch_line(model.target)
    if line is not None:
        one_h5md = model.collective_open   # one H5MD file (which MPI ranks open together)
        per_worker = line.per_further_worker(one_h5md, traits.collective_open and one_h5md, model.atoms)
        if model.launch_s is not None:
            return model.launch_s + per_worker * beyond, "measured in a report of the executor"
        return line.at_cores_s + per_worker * beyond, machine.origin_of("launch")
    if model.launch_s is not None:
        base = model.launch_s
        if traits.launch == "every_rank":
            # the measured run's ranks imported on their cores; more ranks than cores import in turn
            base += model.imports_s * (oversubscription(n, machine) - 1)
        return base, "measured in a report of the executor"
    start = machine.worker_start_s(model.target)
    where = machine.origin_of("start_s") if start is not None else DEFAULTED
    if start is None:
        start = model.imports_s
    if traits.launch == "fork_server":
        return start, where
    if traits.launch == "every_rank":
        return start + model.imports_s * (oversubscription(n, machine) - 1), where
    return start * (1 + max(1.0, 2 * n / machine.cores)), where   # nanny: two fresh starts per worker


def storage_wait(ranks: int, alone: float, demand: float, cpu: float) -> float:
    """Seconds a rank waits for its cold reads when ``ranks`` ranks alternate between reading (``demand`` s
    of one rank's bytes at the storage's aggregate rate; ``alone`` s on its own) and CPU work (``cpu`` s).

    The ranks are the customers of a closed queue; Schweitzer's mean-value approximation for one queue
    and a delay gives ``R = ((N D - Z) + sqrt((N D - Z)^2 + 4 D Z)) / 2``; a rank never reads faster than alone.
    """
    nd = ranks * demand
    wait = ((nd - cpu) + math.sqrt((nd - cpu) ** 2 + 4 * demand * cpu)) / 2
    return max(alone, wait)


def terms_at(model: Model, n: int, machine: Machine | None = None) -> Terms:
    """Seconds of each term of t_wall(N) (docs/scaling.md) on ``machine`` (default: this one)."""
    machine = machine or this_machine()
    tasks = n_tasks_at(model, n)
    active = min(n, tasks)
    q = math.ceil(tasks / n)
    over = oversubscription(n, machine)
    bytes_rank = q * model.bytes / tasks
    frames_rank = q * model.frames / tasks
    s_byte = model.read_s_per_byte + model.read_growth * (n - 1)
    s_frame = model.compute_s_per_frame + model.compute_growth * (n - 1)
    rate = 1 / s_byte / over if s_byte > 0 else math.inf
    storage = machine.read_bps(active) / active if model.storage_reads != "none" else math.inf
    read = bytes_rank / min(rate, storage) if bytes_rank else 0.0
    read_unbound = bytes_rank / rate if bytes_rank and rate < math.inf else 0.0
    comp = frames_rank * s_frame * over
    if over > 1:
        # A worker that has finished its tasks frees its core: the longer of all the work over the cores and one share.
        cores = machine.cores
        comp = max(model.frames * s_frame / cores, frames_rank * s_frame)
        if bytes_rank and rate < math.inf:
            read_unbound = max(model.bytes * s_byte / cores, bytes_rank * s_byte)
            read = max(read_unbound, bytes_rank / storage)
    if model.storage_reads == "apart" and bytes_rank:
        read = read_unbound + storage_wait(active, bytes_rank / machine.read_bps(1),
                                           bytes_rank / machine.read_bps(active), read_unbound + comp)
    files = files_per_rank(model, n, tasks)
    if n == 1:
        meta = 0.0   # one process: the file the preparation opened is the one its tasks read
    elif machine.metadata_ms is not None:
        meta = active * files * machine.metadata_ms / 1e3
    else:
        open_s = machine.open_ms / 1e3 if machine.open_ms is not None else model.open_s
        meta = files * open_s * over
    # The straggler's rank does the same share at its own rates; the wall waits for the slower.
    slow_read = max(read, read_unbound * model.slow_read)
    work = meta + read + comp
    if n > 1:   # one rank alone is the model's median rank: the straggler is one among several
        work = max(work, meta + slow_read + comp * model.slow_compute)
    stages = math.ceil(math.log2(n)) if n > 1 else 0
    comm = stages * model.alpha_s + move_at(model, n, tasks, machine)
    startup = (model.slow_startup_s if n > 1 else 0.0) + launch_at(model, n, machine)[0]
    # Serial phases are not stretched beyond the cores: the other ranks wait for rank 0 asleep.
    fixed = model.fixed_s
    ideal_io = model.bytes / rate / n if rate < math.inf else 0.0
    idle = q - tasks / n
    granularity = idle * (model.bytes / tasks / rate if rate < math.inf else 0.0) \
        + idle * model.frames / tasks * s_frame * over
    return Terms(n=n, fixed=fixed, startup=startup, metadata=meta, read=read, compute=comp,
                 straggler=work - (meta + read + comp), communication=comm, work=work, tasks=tasks, files=files,
                 storage_excess=read - read_unbound, oversubscription=over, granularity=granularity,
                 ideal_io=ideal_io)


def wall_at(model: Model, n: int, machine: Machine | None = None) -> float:
    """Predicted wall time (s) at ``n`` ranks: :func:`terms_at`'s fixed, start-up, work and communication terms."""
    return terms_at(model, n, machine).total


def _limit(model: Model, n: int, machine: Machine, t: Terms) -> str:
    """The resource that holds the run back at N: the largest loss against perfect scaling."""
    t1 = terms_at(model, 1, machine)
    w1 = t1.total
    losses = {
        "start-up": t.fixed + t.startup - (t1.fixed + t1.startup) / n + t.straggler,
        "metadata": t.metadata - t1.metadata / n,
        "storage bandwidth": t.storage_excess - t1.storage_excess / n,
        "communication": t.communication,
        "too few tasks or chunks": t.granularity,
        "cores (oversubscribed)": (t.read - t.storage_excess + t.compute) * (1 - 1 / t.oversubscription),
    }
    if model.straggler and t.straggler > 0:
        cause = "start-up" if model.slow_startup_s else ("read I/O" if model.slow_read > 1 else "compute")
        losses["start-up"] -= t.straggler
        losses[f"straggler: {cause}"] = t.straggler + (model.slow_startup_s if n > 1 else 0.0)
        if model.slow_startup_s:
            losses["start-up"] -= model.slow_startup_s
    worst = max(losses, key=losses.get)
    if losses[worst] > 0.1 * w1 / n and losses[worst] > 0.1 * t.total:
        return worst
    return "read I/O" if t.read > t.compute else "compute"


def _ends(model: Model, machine: Machine) -> tuple[tuple[Model, Machine], tuple[Model, Machine]]:
    """The (model, machine) pairs at the two ends of the range: inputs at their spread's ends, start-up
    that nothing measured at /2 and x2, and compute on physical cores only where hyperthreads share them."""
    lo_c, hi_c = model.compute_spread
    lo_r, hi_r = model.read_spread
    start_measured = model.launch_s is not None or (machine.worker_start_s(model.target) is not None
                                                    and machine.origin_of("start_s") != DEFAULTED)
    k = 1.0 if start_measured else DEFAULT_START_FACTOR
    low = replace(model, compute_s_per_frame=model.compute_s_per_frame * lo_c,
                  read_s_per_byte=model.read_s_per_byte * lo_r, imports_s=model.imports_s / k,
                  launch_s=model.launch_s)
    high = replace(model, compute_s_per_frame=model.compute_s_per_frame * hi_c,
                   read_s_per_byte=model.read_s_per_byte * hi_r, imports_s=model.imports_s * k)
    def launch(end: int):
        return tuple(x.scaled(x.per_worker_range[end]) for x in machine.launch)

    low_machine = replace(machine, start_s=tuple((e, v / k) for e, v in machine.start_s), launch=launch(0))
    high_machine = replace(machine, start_s=tuple((e, v * k) for e, v in machine.start_s), launch=launch(1))
    if machine.threads_per_core > 1:
        high_machine = replace(high_machine,
                               cores_per_node=max(1, machine.cores_per_node // machine.threads_per_core))
    return (low, low_machine), (high, high_machine)


def predict(report: RunReport, ns: list[int], machine: Machine | None = None,
            target: str | None = None) -> list[Prediction]:
    """Wall time, its range, S(N), E(N) and the limit at each N (S and E against the model's own N = 1)."""
    return predict_model(fit(report, target), ns, machine)


def predict_model(model: Model, ns: list[int], machine: Machine | None = None) -> list[Prediction]:
    """The :class:`Prediction` at each N of ``ns`` from a fitted model (S and E against its own N = 1)."""
    machine = machine or this_machine()
    w1 = wall_at(model, 1, machine)
    (lo_m, lo_mach), (hi_m, hi_mach) = _ends(model, machine)
    line = machine.launch_line(model.target)
    missed = line.wall_range if line is not None else (1.0, 1.0)   # the line's misses of its own runs
    out = []
    for n in ns:
        t = terms_at(model, n, machine)
        w = t.total
        ends = (wall_at(lo_m, n, lo_mach), wall_at(hi_m, n, hi_mach))
        lo, hi = min(w, *ends), max(w, *ends)
        if n > 1:
            lo, hi = lo * min(1.0, missed[0]), hi * max(1.0, missed[1])
        s = w1 / w if w > 0 else math.nan
        out.append(Prediction(n, w, s, s / n, _limit(model, n, machine, t), t.tasks, t.files, lo, hi, t))
    return out


def efficiency_threshold(model: Model, machine: Machine | None = None,
                         limit: float = EFFICIENCY_LIMIT) -> int | None:
    """The smallest N at which E(N) < ``limit`` (None if not below ``MAX_SCAN_N``)."""
    machine = machine or this_machine()
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


def levers(model: Model, machine: Machine | None = None) -> list[tuple[str, int | None]]:
    """What would move the N at which E falls below 0.7: the same model with one thing changed."""
    machine = machine or this_machine()
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


def model_assumptions(model: Model, machine: Machine) -> list[tuple[str, str, str]]:
    """The model's own rows of the assumptions block: what came from the reports, what was defaulted."""
    src = "measured in the report" if len(model.fitted_from) == 1 else \
        f"fitted from reports at N = {', '.join(map(str, model.fitted_from))}"
    rows = [("per-rank compute", f"{model.compute_s_per_frame * 1e3:.3g} ms/frame"
             + (f" + {model.compute_growth * 1e6:.3g} us/frame per further worker" if model.compute_growth else ""),
             src),
            ("per-rank read", f"{1e-9 / model.read_s_per_byte:.3g} GB/s" if model.read_s_per_byte else "no reads",
             src)]
    partial = f"{model.partial_bytes / 1e6:.3g} MB " + ("of rows for all frames (a task's share per task)"
                                                         if model.partial_per_frame else "per task (accumulated)")
    rows.append(("pickled job and partial result", f"{model.job_bytes / 1e6:.3g} MB job; {partial}",
                 "measured in the report" if model.payload_measured else DEFAULTED))
    launch = launch_at(model, 2, machine)[1] if model.target else ""
    if model.launch_s is not None:
        how = "the report's own launch phase" + (" and the machine's launch line beyond the cores"
                                                 if machine.launch_line(model.target) else "")
    elif machine.launch_line(model.target):
        how = "the machine's launch line"
    else:
        how = f"from one worker's start ({'probe' if launch != DEFAULTED else 'the launcher imports'})"
    rows.append((f"{model.target} launch", how, MEASURED if model.launch_s is not None else launch or DEFAULTED))
    rows.append(("batch queue wait", "none: a cluster's start and its workers' wait in a batch queue (the report's "
                 "cluster start and queue wait) depend on the site, not on N, and are left out", DEFAULTED))
    if model.busy:
        rows.append(("machine load while the report ran",
                     f"BUSY, its rates are those of a machine with fewer free cores: {model.busy}",
                     "measured in the report"))
    if len(model.fitted_from) == 1:
        rows.append(("per-worker costs growing with N", "none (one report; give reports at 2 or more N to see them)",
                     DEFAULTED))
    return rows


def format_predictions(model: Model, preds: list[Prediction], machine: Machine | None = None,
                       extra: tuple[tuple[str, str, str], ...] = (), other: list[str] | None = None) -> str:
    """The prediction table with its range, assumptions, efficiency threshold and levers; ``other``: a note per N."""
    machine = machine or this_machine()
    other = other or [""] * len(preds)
    lines = [f"prediction of {model.target} runs from a {model.executor} run: {model.frames} frames, "
             f"{model.bytes / 1e9:.3g} GB read, {model.n_tasks} tasks (at most {model.max_tasks}: chunks of "
             f"{model.chunk_frames} frames" + (f", {model.n_parts} parts" if model.n_parts > 1 else "") + ")",
             (f"  per rank: read {1e-9 / model.read_s_per_byte if model.read_s_per_byte else math.inf:.3g} GB/s, "
              f"compute {model.compute_s_per_frame * 1e3:.3g} ms/frame, open {model.open_s * 1e3:.3g} ms/file, "
              f"start-up {model.startup_s:.3g} s; serial phases {model.fixed_s:.3g} s")]
    lines.append(machine.format_assumptions(list(extra) + model_assumptions(model, machine)))
    if model.straggler:
        lines.append(f"  straggler assumed at every N: {model.straggler}")
    lines += [f"  note: {n}" for n in model.notes]
    lines.append(f"{'N':>8} {'wall s':>10} {'range s':>17} {'S(N)':>8} {'E(N)':>6} {'tasks':>7} {'files/rank':>10}"
                 "  limit")
    for p, note in zip(preds, other, strict=True):
        rng = f"{p.t_low:.3g}-{p.t_high:.3g}"
        lines.append(f"{p.n:>8} {p.t_wall:>10.4g} {rng:>17} {p.speedup:>8.3g} {p.efficiency:>6.2f} {p.n_tasks:>7} "
                     f"{p.files_per_rank:>10}  {p.limit}" + (f"  ({note} s)" if note else ""))
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


def assumptions_dict(model: Model, machine: Machine, extra: tuple[tuple[str, str, str], ...] = ()) -> dict:
    """The assumptions block as JSON: the machine's record and every row with its origin."""
    rows = machine.assumptions() + list(extra) + model_assumptions(model, machine)
    return {"machine": machine.to_dict(), "rows": [{"what": w, "value": v, "origin": o} for w, v, o in rows]}


__all__ = ["EFFICIENCY_LIMIT", "Machine", "Model", "Prediction", "Terms", "assumptions_dict", "bytes_moved",
           "efficiency_threshold", "fit", "fit_reports", "format_predictions", "launch_at", "levers", "move_at",
           "oversubscription", "predict", "predict_model", "started_workers", "storage_wait", "terms_at", "wall_at"]
