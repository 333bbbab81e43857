"""How an ensemble's work is cut: rounds of members, and tasks balanced by work within a round.

A member's work is its frames times what a frame costs, priced as ``executor="auto"`` prices a run, plus
what opening it and handing its result home cost (:data:`OPEN_S`).  Tasks are ranges of the ensemble's
axis of about equal work: a member worth more than a task's share is cut into tasks of its own, shorter
members are grouped whole, so that no trajectory is opened by two workers unless it is long.

Members are run in rounds, cut by count and by bytes on disk, each saved before the next starts, so a run
stopped midway keeps every round before and the root holds one round's preparations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..block import FrameRange, split_frames
from ..runspec import JobFacts

#: Seconds opening a trajectory, reading its piece's metadata and handing its result home cost (measured:
#: docs/benchmarks.md, the per-trajectory overhead).
OPEN_S = 5e-4
#: Members of a round, per worker.
ROUND_MEMBERS_PER_WORKER = 64
#: Work (bytes) of a round, per worker.
ROUND_BYTES_PER_WORKER = 4 * 1024**3


@dataclass(frozen=True, eq=False)
class Work:
    """One member's place on the axis and what a frame of it costs (seconds)."""

    offset: int
    n: int
    per_frame: float

    @property
    def total(self) -> float:
        return self.n * self.per_frame + OPEN_S


def per_frame_work(frame_bytes: int, decode_s: float, cost=None) -> float:
    """Seconds a frame costs: its bytes read, its decoding, and the work its analyses declare (``cost``:
    a :class:`~trajscale.analysis.base.FrameCost`; None: none declared)."""
    from ..executors import MAP_S_PER_ATOM_FRAME, MAP_S_PER_PAIR, READ_S_PER_BYTE

    work = float(frame_bytes) * READ_S_PER_BYTE + decode_s
    if cost is not None:
        work += cost.atoms * MAP_S_PER_ATOM_FRAME + cost.pairs * MAP_S_PER_PAIR
    return work


def rounds_of(sizes: Sequence[float], n_workers: int, max_members: int | None = None) -> list[tuple[int, int]]:
    """Consecutive members as rounds: ``(first, end)`` indices into ``sizes`` (each member's bytes, 0 where
    not known), each of at most ``max_members`` members and about :data:`ROUND_BYTES_PER_WORKER` per worker."""
    max_members = max_members or ROUND_MEMBERS_PER_WORKER * max(1, n_workers)
    max_work = ROUND_BYTES_PER_WORKER * max(1, n_workers)
    out, first, work = [], 0, 0.0
    for i, size in enumerate(sizes):
        if i > first and (i - first >= max_members or work + size > max_work):
            out.append((first, i))
            first, work = i, 0.0
        work += size
    if len(sizes):
        out.append((first, len(sizes)))
    return out


def plan_round(works: Sequence[Work], n_tasks: int) -> list[FrameRange]:
    """About ``n_tasks`` axis ranges of about equal work over ``works`` (consecutive on the axis)."""
    total = sum(w.total for w in works)
    share = total / max(1, n_tasks)
    out: list[FrameRange] = []
    group_start, group_work = None, 0.0
    for w in works:
        if w.n == 0:
            continue
        if w.total >= share and w.n > 1:   # a long member: tasks of its own
            if group_start is not None:
                out.append(FrameRange(group_start, w.offset))
                group_start, group_work = None, 0.0
            k = min(w.n, max(1, round(w.total / share)))
            out += [FrameRange(w.offset + r.start, w.offset + r.stop) for r in split_frames(w.n, k)]
            continue
        if group_start is None:
            group_start = w.offset
        group_work += w.total
        if group_work >= share:
            out.append(FrameRange(group_start, w.offset + w.n))
            group_start, group_work = None, 0.0
    if group_start is not None:
        last = next(w for w in reversed(works) if w.n)
        out.append(FrameRange(group_start, last.offset + last.n))
    return out


@dataclass(frozen=True, kw_only=True, eq=False)
class RoundFacts(JobFacts):
    """A round's frames (its members' positions on the ensemble's axis) and their work, planned by
    :func:`plan_round` instead of by frames alone."""

    works: tuple[Work, ...] = ()

    def plan(self, n_tasks: int, n_workers: int, max_block_bytes: int) -> list[FrameRange]:
        return plan_round(self.works, n_tasks)


__all__ = ["OPEN_S", "RoundFacts", "Work", "per_frame_work", "plan_round", "rounds_of"]
