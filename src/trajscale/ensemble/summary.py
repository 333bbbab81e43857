"""What an ensemble run cost, per trajectory: counts, bytes and seconds, and the slowest trajectories.

The run's :class:`~trajscale.report.timing.RunReport` times its tasks and workers; a task of an ensemble
reads several trajectories, and a long trajectory is read by several tasks.  :class:`EnsembleFacts`
adds the view by trajectory (frames, bytes, seconds preparing, opening, reading and mapping each), so a
report names the slowest trajectories, not only the slowest tasks.  It is written into the report's
JSON under ``"ensemble"`` (:func:`report_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Trajectories a summary names as the slowest.
SLOWEST = 5


@dataclass(frozen=True)
class EnsembleFacts:
    """An ensemble run by trajectory.

    Attributes
    ----------
    origin
        The catalog or glob.
    n_trajectories, n_finished, n_refused, n_skipped
        Trajectories in the ensemble; analysed by this run; refused; skipped (saved by a run before).
    per_trajectory
        Each finished trajectory's costs: name, frames, bytes, t_prepare (on the root), t_open, t_read and
        t_compute (in the tasks, summed over its pieces), seconds (the tasks' three).
    t_prepare_members
        Seconds the root spent preparing the members (topologies, selections, references).
    """

    origin: str = ""
    n_trajectories: int = 0
    n_finished: int = 0
    n_refused: int = 0
    n_skipped: int = 0
    per_trajectory: tuple[dict, ...] = field(default_factory=tuple)
    t_prepare_members: float = 0.0

    @property
    def atoms(self) -> str:
        """The atoms a frame of each finished trajectory was read with: ``"214"``, or a range ``"214-3341"``
        (empty when none finished)."""
        counts = [int(t.get("atoms", 0)) for t in self.per_trajectory]
        if not counts:
            return ""
        lo, hi = min(counts), max(counts)
        return f"{lo}" if lo == hi else f"{lo}-{hi}"

    @property
    def bytes_read(self) -> int:
        return sum(int(t["bytes"]) for t in self.per_trajectory)

    def slowest(self, n: int = SLOWEST) -> list[dict]:
        """The ``n`` trajectories whose tasks took longest (opening, reading and mapping them), slowest first."""
        return sorted(self.per_trajectory, key=lambda t: -t["seconds"])[:n]

    def to_dict(self) -> dict:
        return {"origin": self.origin, "n_trajectories": self.n_trajectories, "n_finished": self.n_finished,
                "n_refused": self.n_refused, "n_skipped": self.n_skipped, "bytes_read": self.bytes_read,
                "t_prepare_members": self.t_prepare_members,
                "slowest": [t["name"] for t in self.slowest()], "per_trajectory": list(self.per_trajectory)}

    def lines(self) -> list[str]:
        """The summary's lines about the trajectories."""
        out = [f"trajectories: {self.n_finished} analysed"
               + (f", {self.n_skipped} saved before (skipped)" if self.n_skipped else "")
               + (f", {self.n_refused} refused" if self.n_refused else "")
               + f" of {self.n_trajectories}; {self.bytes_read / 1e6:.1f} MB read"
               + (f"; {self.atoms} atoms a frame" if self.atoms else "")]
        if self.n_finished:
            per = [t["seconds"] for t in self.per_trajectory]
            out.append(f"per trajectory: {1e3 * sum(per) / len(per):.1f} ms of tasks on average; slowest: "
                       + ", ".join(f"{t['name']} ({t['seconds']:.3g} s)" for t in self.slowest(3)))
        return out


def report_dict(report, facts: EnsembleFacts) -> dict:
    """The run report's JSON with the trajectories' view under ``"ensemble"`` (a report reader ignores it)."""
    d = report.to_dict()
    d["ensemble"] = facts.to_dict()
    return d


__all__ = ["EnsembleFacts", "report_dict"]
