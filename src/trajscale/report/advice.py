"""Advice rules: small functions of ``(report, diagnosis)`` returning an :class:`Advice` or None; :data:`RULES` is a
plain dict whose order is the order of importance."""

from __future__ import annotations

import logging
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

from ..facts import LayoutFacts, RunRead
from .diagnose import SHORT_RUN_S, Diagnosis, measure
from .metrics import PHASE_LABELS, fmt_comm_ratio, fmt_ratio, worker_timings
from .stragglers import STRAGGLER_FACTOR, Straggler
from .timing import RunReport

log = logging.getLogger(__name__)

#: Read amplification above this is worth a rechunk.
AMPLIFICATION_LIMIT = 2.0
#: Fixed costs (serial preparation, starting and feeding workers) above this
#: fraction of a run's wall time are what limits its speed-up.
FIXED_COST_FRACTION = 0.5
#: Runs shorter than this are not worth advice on fixed costs.
FIXED_COST_MIN_WALL = 0.5
#: Several analyses in one pass: a union of their atoms this share of the file's spans most of it ...
UNION_MOST = 0.5
#: ... and an analysis mapping less than this share of the union reads mostly atoms it does not need.
SMALL_SHARE = 0.1
#: The file advice names in place of a stream's temporary copy, which the run deletes when it ends.
KEPT_STREAM = "FILE.h5md"


@dataclass(frozen=True, slots=True)
class Advice:
    """One piece of advice: which rule fired, what to do, and the measured reason."""

    rule: str
    message: str
    reason: str


def _source_path(report: RunReport) -> str:
    return report.source.path or "FILE"


def kept_options(src: LayoutFacts) -> str:
    """``rechunk`` options keeping the file's compression and precision (rechunk's defaults would
    decompress the file, or store a lossy one's floats plainly)."""
    out = ""
    if src.compression not in (None, "", "none"):
        out += f" --compression {src.compression}"
    prec = src.precision
    if prec is not None and prec.angstrom is not None:
        out += f" --precision {float(prec.angstrom):g}"
        if (prec.encoding if prec.option is None else prec.option) not in (None, "floats"):
            # (a report from before the option was recorded: its one encoding other than floats is deltas)
            out += f" --encoding {prec.option or 'deltas'}"
    return out


def rule_io_bound_format(report: RunReport, d: Diagnosis) -> Advice | None:
    """I/O-bound on a source whose reader decodes more than the selected atoms (the facts' ``decoding``):
    convert to H5MD, whose frames are read in place, and read with MPI-IO, or segment.  A file still
    being written cannot be converted while it grows."""
    if report.meta.follow is not None:
        return None
    src = report.source
    if d.r_comp_io is None or d.r_comp_io >= 1 or not src.decoding:
        return None
    chain = src.n_segments is not None   # parts: already segments, and convert takes the parts themselves
    top = shlex.quote(report.meta.topology) if report.meta.topology else "TOPOLOGY"
    given = list(report.meta.trajectories or ()) or None   # the files the run was given: the parts of a chain
    path = (files_argument(given) if given else "PART..." if chain else shlex.quote(_source_path(report)))
    stem = _chain_stem(given) if chain and given else _stem(report)
    what = (src.segment_formats if chain else src.format) or ""
    return Advice(
        "io-bound-format",
        f"convert to H5MD (`trajscale convert {top} {path} -o {stem}.h5md`) and read it with "
        "MPI-IO (`--executor mpi`)"
        + ("" if chain else ", or split the trajectory into segments"),
        f"I/O-bound: R_comp/IO = {fmt_ratio(d.r_comp_io)} (compute {d.totals['t_compute']:.3g} s, "
        f"read {d.totals['t_io']:.3g} s) on a {what.upper() or 'non-H5MD'} source")


def _relevant_patterns(report: RunReport, amp: dict) -> dict:
    """The read-amplification patterns that match how this run read the file."""
    n_src = report.source.n_atoms
    frames = sum(t.frames for t in report.tasks)
    subset = n_src is not None and frames and report.bytes_read / frames < 0.5 * n_src * 12
    sizes = [t.frames for t in report.tasks]

    def used(name: str) -> bool:   # "block of 100 frames", or "all 20 frames" in a short file
        if name == "one frame":
            return bool(sizes) and median(sizes) < 10
        return ("subset" in name) == bool(subset) or "subset" not in name

    return {k: v for k, v in amp.items() if used(k)}


def files_argument(paths: list[str]) -> str:
    """The files as a shell argument: a glob when one matches exactly these files in order, else every name quoted."""
    if len(paths) > 3 and len({os.path.dirname(p) for p in paths}) == 1:
        folder, names = os.path.dirname(paths[0]), [os.path.basename(p) for p in paths]
        head, tail = os.path.commonprefix(names), os.path.commonprefix([n[::-1] for n in names])[::-1]
        tail = tail[max(0, len(head) + len(tail) - min(map(len, names))):]   # head and tail must not overlap
        if not any(c in head + tail for c in "*?[]") and names == sorted(names):
            import glob

            pattern = os.path.join(folder, head + "*" + tail)
            if sorted(glob.glob(pattern)) == sorted(paths):
                return (shlex.quote(folder) + "/" if folder else "") + shlex.quote(head) + "*" + shlex.quote(tail)
    return " ".join(shlex.quote(p) for p in paths)


def _chain_stem(paths: list[str]) -> str:
    """A chain's name for its converted file: the parts' common name without their numbers, else ``chain``."""
    head = os.path.commonprefix([os.path.basename(p) for p in paths])
    return head.rstrip("0123456789._-") or "chain"


def _stem(report: RunReport) -> str:
    return os.path.splitext(os.path.basename(_source_path(report)))[0] or "traj"


def _chunks_where(src: LayoutFacts) -> str:
    if src.chunks is None:
        return ""
    return f"chunks {src.chunks if src.chunks else 'contiguous'}: "


def _own_read_advice(report: RunReport, own: RunRead) -> Advice | None:
    """Advice from what the run's own reads cost: rechunk only into a layout that reads measurably less."""
    amp = float(own.amplification)
    if amp <= AMPLIFICATION_LIMIT:
        return None
    where = _chunks_where(report.source)
    n_src = report.source.n_atoms
    what = (f"reading the run's {own.n_atoms}" + (f" of {n_src}" if n_src is not None else "")
            + f" atoms, {own.frames_per_task} frames per task, costs {amp:.1f}x the bytes asked for")
    alts = {k: float(v) for k, v in own.alternatives if v is not None}
    best = min(alts, key=alts.get) if alts else None
    path = shlex.quote(_source_path(report))
    if best is not None and alts[best] <= amp / 1.5:
        kept = kept_options(report.source)
        if "--compression none" in best:
            kept = re.sub(r" --compression \S+", "", kept)
        return Advice(
            "chunk-amplification",
            f"rechunk the file: `trajscale rechunk {path} -o {_stem(report)}.rechunked.h5md {best}{kept}`",
            f"{where}{what}; with {best} it would cost {alts[best]:.1f}x")
    sel, top = own.selection, own.topology
    if not (sel and top):
        return Advice("chunk-amplification", "write a file of only the atoms this run reads (convert with --select)",
                      f"{where}{what}; no chunk layout reads less for these atoms")
    return Advice(
        "chunk-amplification",
        f"write a file of only the atoms this run reads, which then costs 1.0x: `trajscale convert "
        f"{shlex.quote(str(top))} {path} --select {shlex.quote(sel)} -o {_stem(report)}.selection.h5md`",
        f"{where}{what}; no chunk layout reads less for these atoms")


def rule_chunk_amplification(report: RunReport, d: Diagnosis) -> Advice | None:
    """A chunk layout that reads > 2x the bytes asked for by this run's reads: rechunk."""
    src = report.source
    if src.run_read is not None:
        return _own_read_advice(report, src.run_read)
    # A report without its own reads' cost (written before trajscale recorded it): the file's patterns.
    amp = {k: float(v) for k, v in src.read_amplification or ()}
    if not amp:
        return None
    pats = _relevant_patterns(report, amp)
    if not pats:
        return None
    worst = max(pats, key=pats.get)
    if pats[worst] <= AMPLIFICATION_LIMIT:
        return None
    where = _chunks_where(src)
    layout = "frame" if worst == "one frame" else "auto"
    if layout == "auto" and src.planned_chunks is not None and src.chunks == src.planned_chunks:
        # Frame chunks are already the planned ones: the cost is the selection's spread over the atoms.
        return Advice(
            "chunk-amplification",
            f"the file already has the planned frame chunks, so rechunking would not help this selection; "
            f"`trajscale inspect {_source_path(report)} --pattern atoms:SEL --topology TOP` says what would "
            "read less (e.g. a file of only the selected atoms)",
            f"{where}{_pattern_cost(worst, pats[worst])}")
    return Advice(
        "chunk-amplification",
        f"rechunk the file: `trajscale rechunk {shlex.quote(_source_path(report))} -o fixed.h5md "
        f"--chunks {layout}{kept_options(report.source)}`",
        f"{where}{_pattern_cost(worst, pats[worst])}")


def _pattern_cost(pattern: str, amplification: float) -> str:
    return (f"the file's test read \"{pattern}\" (trajscale inspect) costs {amplification:.1f}x the bytes "
            "asked for; this report does not record what its own reads cost")


def _stragglers_by(d: Diagnosis, phases: tuple[str, ...]) -> list[Straggler]:
    return [s for s in d.stragglers if s.component in phases]


def rule_comm_stragglers(report: RunReport, d: Diagnosis) -> Advice | None:
    """Stragglers made slow by communication: fewer, larger gathers."""
    slow = _stragglers_by(d, ("t_comm",))
    if not slow:
        return None
    worst = slow[0]
    return Advice(
        "comm-stragglers",
        "gather results in fewer, larger messages (fewer tasks per worker, or reduce on the workers "
        "before gathering)",
        f"{len(slow)} straggler(s) slowed by communication; {worst.name} spent {worst.excess:.3g} s "
        f"more in t_comm than the median worker ({worst.ratio:.1f}x the median total)")


def _top_loaders(report: RunReport) -> int:
    return sum(1 for w in worker_timings(report) if w.t_init_top > 0)


def rule_init_stragglers(report: RunReport, d: Diagnosis) -> Advice | None:
    """Stragglers made slow by opening the topology/trajectory (Khoshlessan et al. 2020); a topology loaded
    on a single worker is the run's serial preparation, not a straggler."""
    once = _top_loaders(report) <= 1
    slow = [s for s in _stragglers_by(d, ("t_start", "t_init_top", "t_init_traj"))
            if not (s.component == "t_init_top" and once)]
    if not slow:
        return None
    worst = slow[0]
    if worst.component == "t_start":
        msg = (f"{worst.name} was slow to start (process start to ready for its first task): check what "
               "that process imports or loads and where from (a busy or parallel file system, a cold "
               "cache), or reuse started workers (a long-lived pool or cluster)")
    elif worst.component == "t_init_top":
        msg = ("load the topology once and broadcast it (selections and reference) instead of "
               "loading it on every worker")
    else:
        msg = ("avoid every worker opening one shared file: split the trajectory into segments "
               "(one per worker), or use H5MD with MPI-IO")
    return Advice(
        "init-stragglers", msg,
        f"{len(slow)} straggler(s) slowed by {PHASE_LABELS[worst.component]}; {worst.name} spent "
        f"{worst.excess:.3g} s more in {worst.component} than the median worker "
        f"({worst.ratio:.1f}x the median total)")


def _parallel_imbalance(report: RunReport, d: Diagnosis) -> float | None:
    """max/median worker time, leaving out a topology load done once (serial preparation)."""
    if _top_loaders(report) != 1:
        return d.imbalance
    totals = [w.t_total - w.t_init_top for w in worker_timings(report)]
    med = median(totals) if totals else 0.0
    return max(totals) / med if med > 0 else None


def _uneven_tasks(report: RunReport) -> bool:
    per_worker: dict[str, int] = {}
    for t in report.tasks:
        per_worker[t.worker] = per_worker.get(t.worker, 0) + 1
    if len(set(per_worker.values())) > 1 or len(per_worker) < report.n_workers:
        return True
    sizes = [t.frames for t in report.tasks]
    return bool(sizes) and max(sizes) > 1.25 * min(sizes)


def rule_imbalance(report: RunReport, d: Diagnosis) -> Advice | None:
    """Uneven load across workers: more, smaller tasks."""
    n_w = max(1, report.n_workers)
    few = report.n_workers > 1 and report.n_tasks < 2 * n_w and _uneven_tasks(report)
    imb = _parallel_imbalance(report, d)
    high = imb is not None and imb > STRAGGLER_FACTOR
    if not (few or high):
        return None
    why = []
    if high:
        extra = "" if imb == d.imbalance else " (leaving out the one-off topology load)"
        why.append(f"slowest worker takes {imb:.2f}x the median worker time{extra}")
    if few:
        why.append(f"only {report.n_tasks} uneven task(s) for {report.n_workers} workers")
    want = 4 * n_w
    cap = max_tasks(report)
    if cap is not None and cap < want:
        # Tasks are chunk-aligned: more tasks than chunk rows cannot be had from this file.
        frames = sum(t.frames for t in report.tasks) or report.n_frames
        per = max(1, frames // want)
        why.append(f"the file's chunks hold {chunk_frames(report)} frames, so {frames} frames make at most "
                   f"{cap} chunk-aligned tasks")
        return Advice("imbalance",
                      f"rechunk to smaller frame blocks, then use more tasks: `trajscale rechunk "
                      f"{shlex.quote(_source_path(report))} -o rechunked.h5md --chunks {per}"
                      f"{kept_options(report.source)}` and "
                      f"`--tasks {want}`",
                      "; ".join(why))
    return Advice("imbalance", f"use more tasks per worker (e.g. `--tasks {want}`)",
                  "; ".join(why))


def chunk_frames(report: RunReport) -> int | None:
    """Frames per chunk of the run's source (None: none, or contiguous)."""
    chunks = report.source.chunks
    return chunks[0] if chunks and chunks[0] > 1 else None


def max_tasks(report: RunReport) -> int | None:
    """Most chunk-aligned tasks the run's frames allow (None if the layout sets no bound)."""
    cf = chunk_frames(report)
    if cf is None:
        return None
    frames = sum(t.frames for t in report.tasks) or report.n_frames
    return -(-frames // cf)


def _fixed_costs_dominate(report: RunReport, d: Diagnosis) -> bool:
    wall = report.t_total
    return wall >= FIXED_COST_MIN_WALL and d.fixed_costs(report) > FIXED_COST_FRACTION * wall


def rule_fixed_costs(report: RunReport, d: Diagnosis) -> Advice | None:
    """Most of the wall time outside the parallel tasks (Amdahl's serial part)."""
    if not _fixed_costs_dominate(report, d):
        return None
    prep = report.t_prepare + report.t_reduce
    if d.t_outside >= prep:
        msg = ("start the workers once and reuse them for several runs (`ex = ts.make_executor(...)`, "
               "then `ts.run(..., executor=ex)`; a long-lived Dask cluster; one mpiexec job for several "
               "analyses), or give each run more frames: for this little work fewer workers do as well")
    else:
        msg = ("the serial preparation (topology, selections, reference) bounds the speed-up: build the "
               "Universe once and pass it to several runs (`ts.run(analysis, universe, FILE)`), or "
               "analyse more frames per run; more workers cannot shorten it")
    fixed = d.fixed_costs(report)
    return Advice(
        "fixed-costs", msg,
        f"{fixed:.3g} s of the {report.t_total:.3g} s run was outside the workers' tasks "
        f"(preparation {prep:.3g} s, starting/dispatching workers {d.t_outside:.3g} s); "
        f"the busiest worker needed {d.t_busy:.3g} s")


def rule_compute_bound(report: RunReport, d: Diagnosis) -> Advice | None:
    """Compute-bound and balanced: adding workers should scale well."""
    if d.r_comp_io is None or d.r_comp_io <= 1 or _fixed_costs_dominate(report, d):
        return None
    if d.r_comp_comm is not None and d.r_comp_comm <= 1:
        return None
    imbalance = _parallel_imbalance(report, d)
    once = _top_loaders(report) <= 1
    if [s for s in d.stragglers if not (s.component == "t_init_top" and once)]:
        return None
    if imbalance is not None and imbalance > STRAGGLER_FACTOR:
        return None
    imb = "n/a" if imbalance is None else f"{imbalance:.2f}"
    why = (f"compute-bound (R_comp/IO = {fmt_ratio(d.r_comp_io)}, R_comp/comm = {fmt_comm_ratio(d)}) "
           f"and balanced (max/median worker time {imb}, no stragglers)")
    machine = d.machine
    if not machine:   # a report from before workers recorded their cores
        return Advice("compute-bound", "good scaling expected: add workers", why)
    cores = sum(m["cores"] for m in machine)
    workers = sum(m["workers"] for m in machine)
    where = ", ".join(f"{m['cores']} on {m['host']}" for m in machine)
    if workers >= cores:   # never more workers than the cores the run may use
        return Advice("compute-bound",
                      "every core this run may use is busy: more speed needs more cores (more nodes for "
                      "`--executor mpi`, or a larger Dask cluster), not more workers here",
                      f"{why}; {workers} workers on {cores} cores ({where})")
    return Advice("compute-bound", f"good scaling expected: add workers, up to the {cores} cores this run may use "
                                   f"(`-n {cores}`)",
                  f"{why}; {workers} workers on {cores} cores ({where})")


def rule_oversubscribed(report: RunReport, d: Diagnosis) -> Advice | None:
    """More workers than cores on a host: they took turns, and their waits read as slow reads and compute."""
    over = d.oversubscribed
    if not over:
        return None
    worst = max(over, key=lambda m: m["workers"] / max(1, m["cores"]))
    many = len(d.machine) > 1
    n = "ranks per node" if many else "workers"
    return Advice(
        "oversubscribed",
        f"use at most {worst['cores']} {n} (`-n {sum(m['cores'] for m in d.machine)}`"
        f"{' over the nodes' if many else ''}): more workers than cores only take turns on them",
        f"{worst['workers']} workers ran on {worst['host']}, which gives this run {worst['cores']} cores "
        f"(CPUs {worst['affinity']} of its {worst['cpus']}): each worker waited for a core, and that wait is "
        "counted in its read and compute times, so the waiting came from workers > cores, not from the reads")


def rule_union_selection(report: RunReport, d: Diagnosis) -> Advice | None:
    """Several analyses in one pass whose union of atoms spans most of the file: the small ones pay for it."""
    shares = report.meta.analyses
    src_atoms = report.source.n_atoms
    if not shares or not src_atoms or report.n_atoms < UNION_MOST * src_atoms:
        return None
    small = [a for a in shares if a.n_atoms is not None and a.n_atoms < SMALL_SHARE * report.n_atoms]
    if not small:
        return None
    names = ", ".join(f"{a.name} ({a.n_atoms} atoms)" for a in small)
    return Advice("union-selection",
                  f"the pass reads nearly every atom for {names}: where the reads bound the run, run "
                  f"{'them' if len(small) > 1 else 'it'} in a pass of {'their' if len(small) > 1 else 'its'} "
                  "own (or over a file of only those atoms: `trajscale convert --select`); where a large "
                  "analysis reads the file anyway, keep them together, as now",
                  f"the analyses' atoms together are {report.n_atoms} of the file's {src_atoms} atoms "
                  f"({report.n_atoms / src_atoms:.0%}), read once for all {len(shares)} analyses")


Rule = Callable[[RunReport, "Diagnosis"], "Advice | None"]

#: Bytes a chunk of a store read over the network should hold (object stores answer 1-16 MiB ranges best).
REMOTE_CHUNK_BYTES = 4 * 1024**2


def rule_remote_requests(report: RunReport, d: Diagnosis) -> Advice | None:
    """A compressed trajectory behind a URL whose small chunks, each fetched whole, cost a round trip each."""
    net = report.fetched()
    frames = sum(t.frames for t in report.tasks)
    chunks = report.source.chunks
    if not net["requests"] or not frames or not chunks or report.source.compression in (None, "", "none"):
        return None
    per_chunk = frames / chunks[0]   # requests of a run that fetches each chunk it reads once
    if not 0.5 * per_chunk <= net["requests"] <= 2 * per_chunk + len(report.tasks):
        return None   # fewer: chunks merged into larger requests; more: another cause (a stride) than chunks
    n_atoms = report.source.n_atoms or 0
    k = max(2, REMOTE_CHUNK_BYTES // max(1, n_atoms * 12))
    if 2 * chunks[0] > k:
        return None
    url = _source_path(report)
    what = "one-frame chunks cost one request per frame" if chunks[0] == 1 else \
        f"chunks of {chunks[0]} frames cost a request every {chunks[0]} frames"
    return Advice(
        "remote-requests",
        f"{what}: rechunk to {k} frames per chunk (about {REMOTE_CHUNK_BYTES >> 20} MiB) for reading over the "
        f"network: `trajscale rechunk {shlex.quote(url)} -o {_stem(report)}.remote.h5md --layout remote`, then "
        "upload it in place of this object",
        f"{net['requests']} requests for {frames} frames ({net['bytes'] / 1e6:.3g} MB), "
        f"{net['wait_s']:.3g} s waiting on the network; each request costs a round trip whatever its size")


#: name -> rule, most important first.
RULES: dict[str, Rule] = {
    "oversubscribed": rule_oversubscribed,
    "io-bound-format": rule_io_bound_format,
    "chunk-amplification": rule_chunk_amplification,
    "comm-stragglers": rule_comm_stragglers,
    "init-stragglers": rule_init_stragglers,
    "imbalance": rule_imbalance,
    "fixed-costs": rule_fixed_costs,
    "compute-bound": rule_compute_bound,
    "union-selection": rule_union_selection,
    "remote-requests": rule_remote_requests,
}


#: The rules still run on a run too short to diagnose: they read start-up seconds, bytes, or sums over the run.
SHORT_RUN_RULES = ("oversubscribed", "init-stragglers", "chunk-amplification", "io-bound-format", "union-selection",
                   "remote-requests")
#: The rules still run with more workers than cores: the other timings hold the waits for a core.
OVERSUBSCRIBED_RULES = ("oversubscribed", "init-stragglers", "chunk-amplification")


def advise(report: RunReport, d: Diagnosis, rules: dict[str, Rule] | None = None) -> list[Advice]:
    """Run every rule; return the advice of those that fired, in rule order, made consistent
    (:func:`reconcile`); a run too short to diagnose or oversubscribed runs only
    :data:`SHORT_RUN_RULES` or :data:`OVERSUBSCRIBED_RULES`."""
    out = []
    rules = RULES if rules is None else rules
    if d.too_short:
        out.append(Advice("too-short", "too short to diagnose: run more frames (a second or more of tasks) for "
                                       "advice on stragglers, imbalance and scaling",
                          f"the busiest worker's tasks took {d.t_work:.2g} s, under {SHORT_RUN_S:g} s: their "
                          "timings are noise"))
        rules = {k: v for k, v in rules.items() if k in SHORT_RUN_RULES}
    if d.oversubscribed:
        rules = {k: v for k, v in rules.items() if k in OVERSUBSCRIBED_RULES}
    for name, rule in rules.items():
        try:
            a = rule(report, d)
        except (TypeError, ValueError, KeyError, ZeroDivisionError) as exc:   # odd report contents
            log.debug("advice rule %s skipped: %s", name, exc)
            continue
        if a is not None:
            out.append(a)
    out = reconcile(out)
    temporary = report.meta.follow is not None and report.meta.follow.temporary   # a stream's copy, deleted at the end
    return _name_kept_stream(report, out) if temporary else out


def _name_kept_stream(report: RunReport, advice: list[Advice]) -> list[Advice]:
    """Advice that names the run's deleted stream copy names :data:`KEPT_STREAM` (kept with ``--tee``) instead."""
    path = report.source.path
    if not path:
        return advice
    out = []
    for a in advice:
        message = a.message.replace(shlex.quote(path), KEPT_STREAM).replace(path, KEPT_STREAM)
        reason = a.reason.replace(shlex.quote(path), KEPT_STREAM).replace(path, KEPT_STREAM)
        if message != a.message:
            message = (f"keep the stream in a file with `--tee {KEPT_STREAM}` (without it, the stream's copy "
                       f"is deleted when the run ends), then {message}")
        out.append(Advice(a.rule, message, reason))
    return out


_RECHUNK = re.compile(r"`trajscale rechunk [^`]*--chunks (\S+)[^`]*`")


def reconcile(advice: list[Advice]) -> list[Advice]:
    """One output never gives two rechunk commands, nor a rechunk beside "no layout helps": the read-cost
    and the more-tasks rechunks become one with the smaller frame chunks (which never reads more)."""
    by = {a.rule: a for a in advice}
    amp, imb = by.get("chunk-amplification"), by.get("imbalance")
    if amp is None or imb is None or not _RECHUNK.search(imb.message):
        return advice
    m_amp, m_imb = _RECHUNK.search(amp.message), _RECHUNK.search(imb.message)
    want = re.search(r"`--tasks (\d+)`", imb.message)
    tasks = f"`--tasks {want.group(1)}`" if want else "more tasks"
    if m_amp is None:
        new_imb = Advice(imb.rule, imb.message + " (this is for more tasks: it does not lower the read cost above)",
                         imb.reason)
        return [new_imb if a is imb else a for a in advice]
    chunks = m_amp.group(1)
    if chunks != "frame":   # "auto" or a count: the task rechunk's smaller count serves both
        chunks = m_imb.group(1)
        cmd = m_amp.group(0).replace(f"--chunks {m_amp.group(1)}", f"--chunks {chunks}", 1)
        amp = Advice(amp.rule, amp.message.replace(m_amp.group(0), cmd), amp.reason)
    new_imb = Advice(imb.rule, f"after the rechunk above (--chunks {chunks}), use {tasks}", imb.reason)
    return [amp if a.rule == amp.rule else new_imb if a is imb else a for a in advice]


def diagnose(report: RunReport, baseline: RunReport | None = None) -> Diagnosis:
    """Derived numbers, stragglers and advice for one run (``baseline``: an optional serial or N=1 run)."""
    d = measure(report, baseline)
    d.advice = advise(report, d)
    return d
