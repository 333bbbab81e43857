"""An analysis run over an ensemble: each member's pieces mapped with that member's own preparation.

:class:`EnsembleAnalysis` wraps the analysis a user runs (or several: an
:class:`~trajscale.analysis.group.AnalysisGroup`) so that the run engine and every executor run it
unchanged over an :class:`~trajscale.ensemble.source.EnsembleSource`.  A block is the pieces of the
members a task reads; each piece is mapped by the wrapped analysis with its member's
:class:`~trajscale.analysis.base.Prepared` (selections resolved on that member's topology), and its
partial is kept under the member's index.  ``reduce`` combines each member's partials with the wrapped
analysis's own ``reduce``, in frame order, so a member's result has the bits of a run over that
trajectory alone, however the ensemble's frames were cut into tasks.

A piece that could not be read, or that the wrapped analysis refuses (a frame without a box, NaN
coordinates), marks its member failed with the reason; the member's other pieces are then dropped,
and the other members go on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..analysis.base import Analysis, Prepared, analysis_from_config, check_boxes
from ..errors import ConfigError, TrajscaleError


@dataclass(frozen=True)
class EnsembleState:
    """What every worker holds of an ensemble job's preparation: each member's own, by member index."""

    members: Mapping[int, Prepared]
    paths: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class MemberPartial:
    """One member's partial so far: the wrapped analysis's (None: failed), what reading and mapping it
    cost, and why it failed (None: it did not); a member its worker prepared comes home with its
    preparation (``prepared``: what its result is made with) and the seconds preparing it took."""

    partial: object
    frames: int = 0
    t_read: float = 0.0
    t_open: float = 0.0
    t_compute: float = 0.0
    nbytes: int = 0
    opens: int = 0
    error: str | None = None
    prepared: object = None
    t_prepare: float = 0.0

    def stats(self) -> dict:
        return {"frames": self.frames, "t_read": self.t_read, "t_open": self.t_open, "t_compute": self.t_compute,
                "bytes": self.nbytes, "opens": self.opens}


@dataclass(frozen=True, eq=False)
class EnsemblePartial:
    """Partials by member index (a dict in the order the members' frames come)."""

    members: dict[int, MemberPartial] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.members)


@dataclass(frozen=True, eq=False)
class EnsembleOutcome:
    """What the run engine's last step makes of an ensemble's reduced partial: the partial itself (the
    rounds turned each member's into its result as it finished), with the run's report."""

    partial: EnsemblePartial
    report: object = None


class EnsembleAnalysis(Analysis):
    """``analysis`` run over each member of an ensemble on its own.

    Parameters
    ----------
    analysis
        The analysis (or group of analyses) run on every member, or its config.
    """

    name = "ensemble"
    per_frame = False

    def __init__(self, analysis: Analysis | dict) -> None:
        self.analysis = analysis_from_config(analysis) if isinstance(analysis, dict) else analysis
        if not isinstance(self.analysis, Analysis):
            raise ConfigError(f"an ensemble runs an Analysis, not a {type(self.analysis).__name__}")
        self.fields = self.analysis.fields

    @property
    def selections(self) -> tuple[str, ...]:
        return self.analysis.selections

    @property
    def cache_block_bytes(self) -> int | None:
        return self.analysis.cache_block_bytes

    def prepare(self, universe, source) -> Prepared:
        """The members were prepared when the ensemble's source was opened, each on its own topology
        (:mod:`trajscale.ensemble.prepare`): the source holds their preparations."""
        state = getattr(source, "state", None)
        if not isinstance(state, EnsembleState):
            raise ConfigError("an ensemble analysis prepares on an ensemble's source: "
                              "trajscale.run(analysis, ensemble)")
        return Prepared(None, state)

    def block_bytes_per_frame(self, prep: Prepared) -> int:
        return max((self.analysis.block_bytes_per_frame(p) for p in prep.state.members.values()), default=0)

    def map(self, block, prep: Prepared) -> EnsemblePartial:
        inner, state = self.analysis, prep.state
        out: dict[int, MemberPartial] = {}
        for piece in block.pieces:
            if piece.error is not None:
                out[piece.member] = MemberPartial(None, piece.n_frames, piece.t_read, piece.t_open, 0.0, 0,
                                                  int(piece.t_open > 0), piece.error)
                continue
            prepared = piece.prepared if piece.prepared is not None else state.members[piece.member]
            t0 = time.perf_counter()
            error, partial = None, None
            try:
                if inner.needs_box:   # refused here for the member alone (the task wrapper refuses a whole task)
                    check_boxes(piece.block.box, piece.block.frames, state.paths.get(piece.member, ""), inner.name)
                partial = inner.map(piece.block, prepared)
            except TrajscaleError as exc:
                error = str(exc)
            except (ImportError, MemoryError):
                raise   # (the environment's failure, not the trajectory's)
            except Exception as exc:   # noqa: BLE001 - one trajectory's failure is that trajectory's
                error = f"{state.paths.get(piece.member, '')}: {type(exc).__name__}: {exc}"
            out[piece.member] = MemberPartial(partial, piece.n_frames, piece.t_read, piece.t_open,
                                              time.perf_counter() - t0, piece.nbytes, int(piece.t_open > 0), error,
                                              piece.prepared, piece.t_prepare)
        return EnsemblePartial(out)

    def reduce(self, partials: list) -> EnsemblePartial:
        by_member: dict[int, list[MemberPartial]] = {}
        for p in partials:
            if not p:
                continue
            for k, mp in p.members.items():
                by_member.setdefault(k, []).append(mp)
        return EnsemblePartial({k: self._combined(parts) for k, parts in by_member.items()})

    def _combined(self, parts: list[MemberPartial]) -> MemberPartial:
        if len(parts) == 1:
            return parts[0]
        error = next((p.error for p in parts if p.error is not None), None)
        ok = [p.partial for p in parts if p.partial is not None]
        partial = None if error is not None or not ok else ok[0] if len(ok) == 1 else self.analysis.reduce(ok)
        return MemberPartial(partial, sum(p.frames for p in parts), sum(p.t_read for p in parts),
                             sum(p.t_open for p in parts), sum(p.t_compute for p in parts),
                             sum(p.nbytes for p in parts), sum(p.opens for p in parts), error,
                             next((p.prepared for p in parts if p.prepared is not None), None),
                             sum(p.t_prepare for p in parts))

    def result(self, reduced: EnsemblePartial, prep: Prepared) -> EnsembleOutcome:
        return EnsembleOutcome(reduced if isinstance(reduced, EnsemblePartial) else EnsemblePartial())

    def get_config(self) -> dict:
        return {"name": self.name, "analysis": self.analysis.get_config()}


__all__ = ["EnsembleAnalysis", "EnsembleOutcome", "EnsemblePartial", "EnsembleState", "MemberPartial"]
