"""An ensemble run as rounds of the run engine (:mod:`trajscale.engine`).

:class:`EnsembleRounds` cuts the members not saved already into rounds (:mod:`.plan`), prepares each round's
members (refusing those that cannot be), lays their frames on one axis
(:class:`~trajscale.ensemble.source.EnsembleSource`), and after each round turns each member's partial into
results and saves them: the root's memory does not grow with the rounds. Under ``strict`` the first refusal
ends the run, said when the next round is decided so every MPI rank hears it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import time
from array import array

from ..analysis.base import Prepared
from ..analysis.group import AnalysisGroup
from ..engine import Round, Rounds
from ..errors import ConfigError, TrajscaleError
from ..executor_registry import executor_traits
from ..runspec import JobFacts, RunOptions
from ..sources import config_location, reader_modules
from ..util import raise_if_stopped
from .analysis import EnsemblePartial, EnsembleState, KeptPartial, MemberPartial, for_member, kept_group, kept_state
from .catalog import Ensemble
from .plan import RoundFacts, Work, per_frame_work, rounds_of
from .prepare import (
    PREPARE_S,
    WHOLE_BYTES_PER_FILE_BYTE,
    MemberJob,
    Refusal,
    RefusedResult,
    SharedTopologies,
    defer_member,
    prepare_member,
    prepare_members,
)
from .saved import AGGREGATES, MemberRecord, ResultsFolder
from .source import EnsembleSource
from .summary import MemberCosts, MemberStats

log = logging.getLogger(__name__)

#: Modules a worker imports to run an ensemble's tasks (started with the pool's workers).
WORKER_MODULES = ("trajscale.ensemble.source", "trajscale.ensemble.analysis")


class EnsembleRounds(Rounds):
    """The rounds of an ensemble run: ``group`` over each member, results saved in ``folder`` (None: kept)."""

    tasks_per_worker = 4

    def __init__(self, ensemble: Ensemble, group: AnalysisGroup, options: RunOptions,
                 folder: ResultsFolder | None = None, strict: bool = False, max_open: int = 16,
                 round_size: int | None = None) -> None:
        super().__init__(ensemble.origin or "the ensemble", None, options)
        self.ensemble, self.group, self.folder = ensemble, group, folder
        self.strict, self.max_open, self.round_size = strict, max_open, round_size
        self.token = os.urandom(16).hex()
        self.refused: list[Refusal] = []
        self.records: dict[int, MemberRecord] = {}   # finished members' results, without a folder
        self.costs = MemberCosts()   # the finished members' costs, folded together (none kept one by one)
        self.skipped = array("q")   # members whose results a resumed run found saved
        self._by_index: dict[int, MemberJob] = {}   # prepared members of the round under way
        self._rounds: list[tuple[int, int]] = []   # each round's first and end positions in _todo
        self._next = 0   # the next round to prepare
        self._first: list[MemberJob] | None = None   # the first round, prepared with the job
        self._ahead = None   # the next round's preparation, under way while a round runs (a Future)
        self._preparer = None   # the thread that prepares it
        self._offset = 0   # where the next member's frames begin on the axis
        self._topologies = SharedTopologies(options)
        self._todo = array("q")   # the members to run, by index (numbers: a member is made when its round is)
        self._todo_sizes = array("q")   # their bytes on disk (0: not known)
        self._n_tasks = 1   # tasks a round is cut into (what makes a member short enough for its worker)
        self.n_prepared = 0   # members prepared so far
        self._pending: TrajscaleError | None = None   # raised when the next round is decided
        self.t_members = 0.0   # seconds preparing the members
        self.opened = False   # (open ran: this is the process that prepared the job)
        self._modules: tuple[str, ...] | None = None   # what workers start with (reader_modules)
        self._trial: MemberJob | None = None   # the member prepared to learn what preparing imports

    def reader_modules(self) -> tuple[str, ...]:
        """The readers of the members' formats, the ensemble's, and what preparing a member imports."""
        if self._modules is None:
            readers = self._readers()
            self._modules = (*readers, *(m for m in self._preparing_imports() if m not in readers))
        return self._modules

    def _preparing_imports(self) -> list[str]:
        """The modules preparing a member imports, learned here on the first local member: workers start with them."""
        first = next(((i, m) for i, m in enumerate(self.ensemble) if not _fetched(m)), None)
        if first is None:
            return []
        before = set(sys.modules)
        try:
            self._trial = prepare_member(first[0], first[1], self.group, self.options, self._topologies)
        except Exception:   # noqa: BLE001 - refused, if it is, where its round is prepared
            self._trial = None
        new = set(sys.modules) - before
        # a new package's submodules come with it; names of a leading _ are C modules imported by those
        return sorted(n for n in new if n.rpartition(".")[0] not in new and not n.startswith("_"))

    def _readers(self) -> list[str]:
        seen, found = set(), list(WORKER_MODULES)
        for m in self.ensemble:
            where = m.locations()[0]
            kind = (m.source["kind"] if m.source is not None else None, os.path.splitext(where.where)[1].lower(),
                    where.worker_modules())   # (what a read imports)
            if kind in seen:
                continue
            seen.add(kind)
            found += [x for x in _member_readers(m) if x not in found]
        return tuple(found)

    def paths(self) -> tuple[str, ...] | None:
        return None   # (thousands of files: the report names the ensemble, and each member in its own table)

    def open(self, shared: bool) -> tuple[EnsembleSource, range]:
        """The members not saved before, cut into rounds; the first prepared now (its facts are the job's)."""
        t0 = time.perf_counter()
        self.opened = True
        saved = self.folder.saved() if self.folder is not None else set()
        todo, sizes = self._todo, self._todo_sizes
        for i, m in enumerate(self.ensemble):
            if m.name in saved:
                self.skipped.append(i)
            else:
                todo.append(i)
                sizes.append(_file_size(m))
        if self.skipped:
            log.info("%d of %d trajectories were saved by the run before: skipped", len(self.skipped),
                     len(self.ensemble))
        one, workers = _workers_of(self.options)
        self._n_tasks = self.options.n_tasks or (1 if one else workers * (self.options.tasks_per_worker
                                                                          or self.tasks_per_worker))
        self._rounds = rounds_of(sizes, workers, self.round_size)
        self._first = self._next_jobs()
        jobs = self._first or []
        self.t_members = time.perf_counter() - t0
        source = self._source(jobs, self.token)
        source.state = EnsembleState({}, {})   # (each round's job holds its members' preparations)
        done = self._rounds[self._next - 1][1] if self._next else 0   # (the members of the rounds prepared)
        frames = sum(j.n for j in jobs) * len(todo) // max(1, done)   # the whole run's, estimated from a round
        return source, range(0, frames)

    def _next_jobs(self) -> list[MemberJob] | None:
        """The next round's members prepared and laid out (all-refused rounds passed over); None when none is left."""
        while self._next < len(self._rounds):
            t0 = time.perf_counter()
            a, b = self._rounds[self._next]
            members = [(self._todo[p], self.ensemble[self._todo[p]]) for p in range(a, b)]
            # a member's frames in memory, read whole, from its file's bytes (a compressed file's a few times them)
            sizes = {i: self._todo_sizes[p] * (1 if m.source is not None else WHOLE_BYTES_PER_FILE_BYTE)
                     for p, (i, m) in zip(range(a, b), members, strict=True)}
            self._next += 1
            trial = self._trial if self._trial is not None and any(i == self._trial.index for i, _ in members) \
                else None
            later = self._for_workers(members, sizes) - ({trial.index} if trial is not None else set())
            jobs, refused = prepare_members([(i, m) for i, m in members if i not in later
                                             and (trial is None or i != trial.index)], self.group,
                                            self.options, self._topologies)
            if trial is not None:
                jobs.append(trial)
                self._trial = None
            jobs = sorted(jobs + [defer_member(i, m, self.options, sizes[i]) for i, m in members
                                  if i in later], key=lambda j: j.index)
            self._refuse(refused)
            if self._pending is not None:
                raise self._pending
            for k, job in enumerate(jobs):
                jobs[k] = dataclasses.replace(job, read=dataclasses.replace(job.read, offset=self._offset))
                self._offset += job.n
            self._by_index.update((j.index, j) for j in jobs)
            self.n_prepared += len(jobs)
            self.t_members += time.perf_counter() - t0
            log.debug("round %d of %d: %d members prepared (%d refused)", self._next, len(self._rounds), len(jobs),
                      len(refused))
            if jobs:
                return jobs
        return None

    def _for_workers(self, members: list, sizes: dict[int, int]) -> set[int]:
        """The members of a round its workers prepare: those known small (``sizes``: bytes read whole), at most a
        task's share of the round and a fraction of a read block; the others are prepared on the root."""
        total = sum(sizes[i] for i, _ in members)
        share = total / (2 * max(1, self._n_tasks))
        whole = int(self.options.max_block_bytes) // 4
        return {i for i, m in members if 0 < sizes[i] <= share and sizes[i] <= whole}

    def _take_next(self) -> list[MemberJob] | None:
        """The next round's members (prepared with the job, or while the round before ran, or now); the round
        after is prepared in a thread while the workers run this one, unless the one worker is this process."""
        if self._first is not None:
            jobs, self._first = self._first, None
        elif self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            jobs = ahead.result()   # (its refusal under strict, or its error, is raised here)
        else:
            jobs = self._next_jobs()
        if jobs and self._next < len(self._rounds) and not _workers_of(self.options)[0]:   # (one: this process)
            if self._preparer is None:
                from concurrent.futures import ThreadPoolExecutor

                self._preparer = ThreadPoolExecutor(1, thread_name_prefix="ensemble-prepare")
            self._ahead = self._preparer.submit(self._next_jobs)
        return jobs

    def close(self) -> None:
        """The thread preparing ahead is waited for (a round's preparation) and stopped."""
        if self._preparer is not None:
            self._preparer.shutdown(wait=True, cancel_futures=True)
            self._preparer = None

    def _source(self, jobs: list[MemberJob], token: str) -> EnsembleSource:
        from ..sources.base import FRAME_META_BYTES

        return EnsembleSource([j.read for j in jobs], token, self.trajectory, self.max_open,
                              reads_ahead=any(j.reads_ahead for j in jobs),
                              frame_bytes=max((j.frame_bytes for j in jobs), default=FRAME_META_BYTES),
                              decode_s=max((j.decode_s for j in jobs), default=0.0),
                              n_atoms=max((len(j.read.atoms) if j.read.atoms is not None else 0 for j in jobs),
                                          default=0),
                              analysis=self.group.get_config() if any(j.prepared is None for j in jobs) else None)

    def next_round(self, job, facts: JobFacts, stopping: bool) -> Round:
        if stopping:
            raise_if_stopped()
        if self._pending is not None:
            raise self._pending
        jobs = self._take_next()
        if not jobs:
            return Round(job, None, "complete")
        source = self._source(jobs, f"{self.token}/{self._next}")
        state = EnsembleState({j.index: j.prepared for j in jobs if j.prepared is not None},
                              {j.index: j.read.path for j in jobs})
        # a round's blocks within the budget for its own largest frames (another round's may be smaller)
        budget = min(int(self.options.max_block_bytes),
                     self.group.cache_block_bytes or int(self.options.max_block_bytes))
        block_frames = max(1, min(job.block_frames, budget // max(1, source.bytes_per_frame())))
        rjob = dataclasses.replace(job, source=source.get_config(), prepared=Prepared(None, state),
                                   block_frames=block_frames, stride=1, reads_ahead=source.reads_ahead)
        works = tuple(Work(j.read.offset, j.n, per_frame_work(j.frame_bytes, j.decode_s, j.cost)
                           + (PREPARE_S if j.prepared is None else 0.0)) for j in jobs)
        base = {f.name: getattr(facts, f.name) for f in dataclasses.fields(JobFacts)}
        base.update(start=jobs[0].read.offset, stop=jobs[-1].read.offset + jobs[-1].n, step=1, part_starts=(),
                    n_atoms=source.n_atoms, frame_bytes=source.bytes_per_frame())
        return Round(rjob, RoundFacts(**base, works=works))

    def kept(self, reduced: EnsemblePartial) -> EnsemblePartial:
        """Each member of the round just run turned into its results (saved, or kept here)."""
        refused = []
        for idx, mp in reduced.members.items():
            job = self._by_index.pop(idx)   # (its preparation is let go of: the root holds a round's)
            if mp.error is not None:
                refused.append(Refusal(idx, job.member, " ".join(mp.error.split())))
                continue
            try:
                record = self._record(job, mp)
            except TrajscaleError as exc:
                refused.append(Refusal(idx, job.member, " ".join(str(exc).split())))
                continue
            refused += [Refusal(idx, job.member, r.reason, r.analysis, k) for k, r in enumerate(record.results)
                        if isinstance(r, RefusedResult)]
            self.costs.add(MemberStats(job.member.name, mp.frames, mp.nbytes, mp.t_open, mp.t_read, mp.t_compute,
                                       job.t_prepare + mp.t_prepare, mp.opens, mp.atoms))
            if self.folder is None:
                self.records[idx] = record
                continue
            try:
                self.folder.save(job.member.name, record)
            except TrajscaleError as exc:
                self._pending = self._pending or exc
        if self.folder is not None:
            self.folder.sync()
        self._refuse(refused)
        return EnsemblePartial()

    def _record(self, job: MemberJob, mp: MemberPartial) -> MemberRecord:
        if mp.partial is None:
            raise ConfigError(f"{job.read.path}: no frame was analysed")
        prepared = job.prepared if job.prepared is not None else mp.prepared   # (its worker's)
        analysis, own = for_member(self.group, prepared)
        every = tuple(range(len(self.group.analyses)))
        base = prepared.state.kept if analysis is not self.group else every   # (those its preparation kept)
        reasons = dict(prepared.state.refused) if analysis is not self.group else {}
        partial, kept = mp.partial, base
        if isinstance(partial, KeptPartial):   # (and those a frame without a box refused: fewer)
            partial, kept = partial.partial, partial.kept
            reasons.update(mp.partial.refused)
        if kept != base:
            analysis, own = kept_group(self.group, kept), kept_state(own, base, kept)
        mine = dict(zip(kept, analysis.result(partial, own), strict=True))
        parts = dict(zip(kept, (_aggregate_part(a, p, q) for a, p, q in
                                zip(analysis.analyses, partial.partials, own.state.prepared, strict=True)),
                         strict=True))
        results = tuple(mine[k] if k in mine else RefusedResult(a.name, reasons[k])
                        for k, a in enumerate(self.group.analyses))
        partials = tuple(parts.get(k) for k in range(len(self.group.analyses)))
        # what a frame costs, priced alike wherever the member was prepared
        work = mp.frame_work_s if job.prepared is None else per_frame_work(job.frame_bytes, job.decode_s, job.cost)
        stats = {**mp.stats(), "t_prepare": job.t_prepare + mp.t_prepare, "frame_work_s": work}
        return MemberRecord(job.member.name, job.index, results, stats, partials)

    def _refuse(self, refused: list[Refusal]) -> None:
        for r in refused:
            log.debug("%s refused: %s", r.member.name, r.reason)
        self.refused += refused
        if refused and self.strict and self._pending is None:
            first = refused[0]
            more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
            self._pending = ConfigError(f"{self.trajectory}: trajectory {first.member.name!r} refused{more}: "
                                        f"{first.reason} (strict: one refused trajectory refuses the run)")


def _member_readers(member) -> tuple[str, ...]:
    """What a worker imports to read ``member``: the Source its config, else its location, names."""
    if member.source is None:
        return reader_modules(member.run_trajectory())
    from ..sources.registry import fetched_modules, source_class

    cls = source_class(member.source["kind"])
    where = config_location(member.source) if member.source.get("path") else member.locations()[0]
    return (cls.__module__, *cls.worker_modules, *where.worker_modules(fetched_modules(where.where)))


def _file_size(member) -> int:
    """A member's bytes, without I/O; 0 where unseen or behind a network client (its size is a request)."""
    if _fetched(member):
        return 0
    if member.source is not None:
        from ..sources.registry import source_class

        try:
            return max(0, int(source_class(member.source["kind"]).member_bytes(member.source)))
        except TrajscaleError:   # (an unknown kind: refused where the member is opened)
            return 0
    total = 0
    for where in member.locations():
        with contextlib.suppress(TrajscaleError):
            total += where.size
    return total


def _fetched(member) -> bool:
    """Whether ``member``'s bytes come through a network client (one a forked worker must not inherit)."""
    return any(where.costs_request for where in member.locations())


def _aggregate_part(analysis, partial, prepared: Prepared):
    """A member's partial and preparation's plain values, for the aggregate (None: no exact aggregate)."""
    if analysis.name not in AGGREGATES:
        return None
    state = prepared.state if isinstance(prepared.state, dict) else {}
    plain = {k: v for k, v in state.items() if isinstance(v, bool | int | float | str)}
    return {"partial": partial, "state": plain}


def _workers_of(options: RunOptions) -> tuple[bool, int]:
    """Whether the executor has one worker, and how many it has (an unregistered class: its ``n_workers``)."""
    ex = options.executor
    if isinstance(ex, str):
        one = executor_traits(ex).workers == "one"
        return one, 1 if one else options.n_workers or os.cpu_count() or 1
    one = ex.traits is not None and ex.traits.workers == "one"
    return one, 1 if one else ex.n_workers


__all__ = ["EnsembleRounds"]
