"""What only some runs have: the executor ``auto`` chose, how a followed run ended, each analysis of a pass;
defined apart from :mod:`.runfacts`, so that the most common and shortest run does not create their classes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ExecutorChoice:
    """What ``executor="auto"`` chose, and why (the job's estimated work against a pool's start)."""

    chosen: str
    why: str

    def __str__(self) -> str:
        return f"auto: {self.chosen} ({self.why})"

    def to_dict(self) -> dict:
        return {"chosen": self.chosen, "why": self.why}

    @classmethod
    def from_dict(cls, d) -> ExecutorChoice | None:
        """From :meth:`to_dict`, or from the line ``"auto: NAME (why)"`` older reports stored."""
        if isinstance(d, dict) and "chosen" in d:
            return cls(str(d["chosen"]), str(d.get("why", "")))
        if not (isinstance(d, str) and d.startswith("auto: ") and d.endswith(")") and " (" in d):
            return None
        chosen, _, why = d[len("auto: "):-1].partition(" (")
        return cls(chosen, why)


@dataclass(frozen=True, slots=True)
class FollowFacts:
    """A followed run: its frames, its ending's key (None: running) and sentence; ``temporary``: a stream's copy."""

    frames: int
    ended: str | None = None
    why: str | None = None
    temporary: bool = False

    def to_dict(self) -> dict:
        d = {"frames": self.frames, "ended": self.ended, "why": self.why}
        if self.temporary:
            d["temporary"] = True
        return d

    @classmethod
    def from_dict(cls, d) -> FollowFacts | None:
        if not isinstance(d, dict):
            return None
        return cls(int(d.get("frames") or 0), d.get("ended"), d.get("why"), bool(d.get("temporary")))


@dataclass(frozen=True, slots=True)
class AnalysisShare:
    """One analysis of a pass: its name, summed ``map``/``reduce`` s, its atoms (None: all), its selections."""

    name: str
    t_compute: float
    n_atoms: int | None
    selections: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"name": self.name, "t_compute": self.t_compute, "n_atoms": self.n_atoms,
                "selections": list(self.selections)}

    @classmethod
    def from_dict(cls, d) -> AnalysisShare | None:
        if not isinstance(d, dict) or "name" not in d:
            return None
        n = d.get("n_atoms")
        return cls(str(d["name"]), float(d.get("t_compute") or 0.0), int(n) if isinstance(n, int) else None,
                   tuple(str(s) for s in d.get("selections") or ()))


__all__ = ["AnalysisShare", "ExecutorChoice", "FollowFacts"]
