"""What an ensemble run cost, by trajectory: counts, bytes and seconds, and the slowest trajectories.

A task reads several trajectories and a long trajectory is read by several tasks, so the report names the
slowest trajectories, not only tasks (:func:`report_dict`). The root folds each finished trajectory's
:class:`MemberStats` into one :class:`MemberCosts`: the same size whatever the number of trajectories.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass, field

#: Trajectories a summary names as the slowest (the most a run keeps by name).
SLOWEST = 5
#: The histogram of trajectories' seconds: bins of a factor of 2, the first ending at 2**LOG2_FIRST s
#: (61 µs), the last open above (2**(LOG2_FIRST + BINS - 2) s: 36 min).
LOG2_FIRST = -14
BINS = 32


@dataclass(frozen=True, eq=False)
class MemberStats:
    """What one finished trajectory cost: frames, bytes, seconds opening, reading, mapping and preparing it."""

    name: str
    frames: int
    bytes: int
    t_open: float
    t_read: float
    t_compute: float
    t_prepare: float = 0.0
    opens: int = 0
    atoms: int = 0

    @property
    def seconds(self) -> float:
        """Its time in the tasks (preparing it is apart: the first member of a topology pays for parsing it)."""
        return self.t_open + self.t_read + self.t_compute

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "seconds": self.seconds}


#: The totals a :class:`MemberCosts` keeps, summed over the trajectories.
_SUMMED = ("frames", "bytes", "opens", "t_open", "t_read", "t_compute", "t_prepare", "seconds")


@dataclass
class MemberCosts:
    """The trajectories' costs folded together as they finish: the same size at any number of them."""

    n: int = 0   # trajectories folded in
    frames: int = 0
    bytes: int = 0
    opens: int = 0
    t_open: float = 0.0
    t_read: float = 0.0
    t_compute: float = 0.0
    t_prepare: float = 0.0
    seconds: float = 0.0
    atoms_min: int = 0
    atoms_max: int = 0
    histogram: list[int] = field(default_factory=lambda: [0] * BINS)   # by seconds: :func:`histogram_edges`
    _slowest: list = field(default_factory=list, repr=False)   # a heap of (seconds, -order, stats): the k slowest

    def add(self, stats: MemberStats) -> None:
        """Fold in one trajectory (kept by name only while it is among the :data:`SLOWEST` slowest)."""
        s = stats.seconds
        self.atoms_min = stats.atoms if self.n == 0 else min(self.atoms_min, stats.atoms)
        self.atoms_max = max(self.atoms_max, stats.atoms)
        for name in _SUMMED:
            setattr(self, name, getattr(self, name) + getattr(stats, name))
        self.histogram[min(BINS - 1, max(0, math.floor(math.log2(s)) - LOG2_FIRST + 1)) if s > 0 else 0] += 1
        entry = (s, -self.n, stats)   # (ties: the first finished stays, as a stable sort keeps it)
        self.n += 1
        if len(self._slowest) < SLOWEST:
            heapq.heappush(self._slowest, entry)
        elif entry[:2] > self._slowest[0][:2]:
            heapq.heapreplace(self._slowest, entry)

    def slowest(self, n: int = SLOWEST) -> list[MemberStats]:
        """The ``n`` (at most :data:`SLOWEST`) trajectories whose tasks took longest, slowest first."""
        return [e[2] for e in sorted(self._slowest, key=lambda e: (-e[0], -e[1]))[:n]]

    def to_dict(self) -> dict:
        out = {name: getattr(self, name) for name in ("n", *_SUMMED, "atoms_min", "atoms_max")}
        out["seconds_histogram"] = {"edges": histogram_edges(), "counts": list(self.histogram)}
        return out


def histogram_edges() -> list[float]:
    """The upper bounds of :attr:`MemberCosts.histogram`'s bins but the last (open above), in seconds."""
    return [2.0 ** (LOG2_FIRST + k) for k in range(BINS - 1)]


@dataclass(frozen=True, eq=False)
class EnsembleFacts:
    """An ensemble run by trajectory: counts, the finished ones' costs, the root's seconds preparing."""

    origin: str = ""
    n_trajectories: int = 0
    n_finished: int = 0
    n_refused: int = 0
    n_skipped: int = 0
    costs: MemberCosts = field(default_factory=MemberCosts)
    t_prepare_members: float = 0.0
    #: the commits the Hub's revisions were read at (``{"hf://datasets/ORG/NAME@main": commit}``)
    revisions: dict = field(default_factory=dict)

    @property
    def atoms(self) -> str:
        """The atoms a frame of each finished trajectory was read with: ``"214"``, or a range ``"214-3341"``
        (empty when none finished)."""
        c = self.costs
        if not c.n:
            return ""
        return f"{c.atoms_min}" if c.atoms_min == c.atoms_max else f"{c.atoms_min}-{c.atoms_max}"

    @property
    def bytes_read(self) -> int:
        return self.costs.bytes

    def slowest(self, n: int = SLOWEST) -> list[dict]:
        """The ``n`` trajectories whose tasks took longest (opening, reading and mapping them), slowest first
        (at most :data:`SLOWEST`)."""
        return [s.to_dict() for s in self.costs.slowest(n)]

    def to_dict(self) -> dict:
        return {"origin": self.origin, "n_trajectories": self.n_trajectories, "n_finished": self.n_finished,
                "n_refused": self.n_refused, "n_skipped": self.n_skipped, "bytes_read": self.bytes_read,
                "t_prepare_members": self.t_prepare_members, "slowest": [t["name"] for t in self.slowest()],
                "slowest_trajectories": self.slowest(), "trajectories": self.costs.to_dict(),
                **({"revisions": dict(self.revisions)} if self.revisions else {})}

    def lines(self) -> list[str]:
        """The summary's lines about the trajectories."""
        out = [count_line(self.to_dict()) + f"; {self.bytes_read / 1e6:.1f} MB read"
               + (f"; {self.atoms} atoms a frame" if self.atoms else "")]
        if self.costs.n:
            out.append(f"per trajectory: {1e3 * self.costs.seconds / self.costs.n:.1f} ms of tasks on average; "
                       "slowest: " + ", ".join(f"{t['name']} ({t['seconds']:.3g} s)" for t in self.slowest(3)))
        return out


def count_line(facts: dict) -> str:
    """The count of an ensemble run's trajectories: listed = analysed + saved before + refused."""
    return (f"trajectories: {facts['n_finished']} analysed"
            + (f", {facts['n_skipped']} saved before (skipped)" if facts["n_skipped"] else "")
            + (f", {facts['n_refused']} refused" if facts["n_refused"] else "") + f" of {facts['n_trajectories']}")


def report_dict(report, facts: EnsembleFacts) -> dict:
    """The run report's JSON with the trajectories' view under ``"ensemble"`` (a report reader ignores it)."""
    from ..storage import redacted

    d = report.to_dict()
    d["ensemble"] = facts.to_dict()
    return redacted(d)   # (a URL's password, a secret option: never written)


__all__ = ["SLOWEST", "EnsembleFacts", "MemberCosts", "MemberStats", "count_line", "histogram_edges", "report_dict"]
