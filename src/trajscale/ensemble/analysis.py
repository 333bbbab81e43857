"""An analysis run over an ensemble: each member's pieces mapped with that member's own preparation.

:class:`EnsembleAnalysis` wraps the user's analysis (or an
:class:`~trajscale.analysis.group.AnalysisGroup`) so that the run engine and every executor run it
unchanged over an :class:`~trajscale.ensemble.source.EnsembleSource`: each piece of a block is mapped with
its member's own preparation and kept under the member's index, and ``reduce`` combines each member's
partials with the wrapped ``reduce`` in frame order, so a member's result has the bits of a run over that
trajectory alone.  A piece that cannot be read or mapped fails its member alone, with the reason.

A member that some of a group's analyses cannot run (an RDF without a box) is prepared for the others
alone (:func:`prepare_each`, :class:`SomeRefused`) and runs the group it kept (:func:`for_member`), whose
partials travel as :class:`KeptPartial`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..analysis.base import Analysis, Prepared, analysis_from_config, check_boxes
from ..analysis.group import AnalysisGroup
from ..errors import ConfigError, ServerUnreachable, TrajscaleError


@dataclass(frozen=True, eq=False)
class SomeRefused:
    """A member's preparation when some of the run's analyses refused it."""

    prepared: Prepared             # the group of the others'
    kept: tuple[int, ...]          # their positions in the run's group
    refused: Mapping[int, str]     # position -> why each other one refused it


@dataclass(frozen=True, eq=False)
class KeptPartial:
    """The partial of a member that runs only the analyses at ``kept`` (a group of them: ``partial``)."""

    kept: tuple[int, ...]
    partial: object
    refused: Mapping[int, str] = field(default_factory=dict)   # those its frames refused (a box missing)


#: The groups of the analyses members kept: (the run's group, kept positions) -> (the run's group, the group).
_KEPT: dict[tuple[int, tuple[int, ...]], tuple[Analysis, AnalysisGroup]] = {}


def kept_group(analysis: AnalysisGroup, kept: tuple[int, ...]) -> AnalysisGroup:
    """The group of ``analysis``'s analyses at positions ``kept`` (made once per process)."""
    key = (id(analysis), kept)
    entry = _KEPT.get(key)
    if entry is None or entry[0] is not analysis:
        entry = (analysis, AnalysisGroup([analysis.analyses[k] for k in kept]))
        _KEPT[key] = entry
    return entry[1]


def for_member(analysis: Analysis, prepared: Prepared) -> tuple[Analysis, Prepared]:
    """The analysis a member runs and its preparation: the run's, or the group of those that kept it."""
    state = prepared.state
    if isinstance(state, SomeRefused):
        return kept_group(analysis, state.kept), state.prepared
    return analysis, prepared


def prepare_each(analysis: Analysis, universe, source) -> Prepared:
    """``analysis.prepare``; where a group of analyses cannot prepare as a whole, each is asked alone, and the
    member is prepared for those that can (:class:`SomeRefused`).  Raises the group's error when no analysis
    can (the member is refused) or when each can alone."""
    try:
        return analysis.prepare(universe, source)
    except (ImportError, MemoryError):
        raise   # (the environment's failure, not the trajectory's)
    except Exception:
        if not isinstance(analysis, AnalysisGroup) or len(analysis.analyses) < 2:
            raise
        refused = _refusals(analysis, universe, source)
        if not refused or len(refused) == len(analysis.analyses):
            raise
    kept = tuple(k for k in range(len(analysis.analyses)) if k not in refused)
    prep = kept_group(analysis, kept).prepare(universe, source)
    return Prepared(prep.atoms, SomeRefused(prep, kept, refused))


def _refusals(group: AnalysisGroup, universe, source) -> dict[int, str]:
    """Why each analysis of ``group`` that cannot prepare on the member alone refuses it (position -> reason)."""
    out = {}
    for k, a in enumerate(group.analyses):
        try:
            AnalysisGroup([a]).prepare(universe, source)
        except (ImportError, MemoryError, ServerUnreachable):
            raise
        except TrajscaleError as exc:
            out[k] = " ".join(str(exc).split())
        except Exception as exc:   # noqa: BLE001 - a library's error on this member, for this analysis
            out[k] = " ".join(f"{source.path}: {a.name}: {type(exc).__name__}: {exc}".split())
    return out


@dataclass(frozen=True, eq=False)
class EnsembleState:
    """What every worker holds of an ensemble job's preparation: each member's own, by member index."""

    members: Mapping[int, Prepared]
    paths: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class MemberPartial:
    """One member's partial so far (None: failed, ``error`` says why), what reading and mapping it cost, the
    preparation a worker made of it, ``atoms``: the atoms a frame of it was read with, and what a frame of it
    costs as its worker priced it (``frame_work_s``)."""

    partial: object
    frames: int = 0
    t_read: float = 0.0
    t_open: float = 0.0
    t_compute: float = 0.0
    nbytes: int = 0
    opens: int = 0
    error: str | None = None
    prepared: object = field(default=None, metadata={"held": True})   # (reducing keeps it whole: not folded)
    t_prepare: float = 0.0
    atoms: int = 0
    frame_work_s: float = 0.0

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
    """``analysis`` (or a group, or its config) run over each member of an ensemble on its own."""

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
        return max((a.block_bytes_per_frame(p) for a, p in (for_member(self.analysis, q)
                                                              for q in prep.state.members.values())), default=0)

    def map(self, block, prep: Prepared) -> EnsemblePartial:
        inner, state = self.analysis, prep.state
        out: dict[int, MemberPartial] = {}
        for piece in block.pieces:
            if piece.error is not None:
                out[piece.member] = MemberPartial(None, piece.n_frames, piece.t_read, piece.t_open, 0.0, 0,
                                                  int(piece.t_open > 0), piece.error)
                continue
            prepared = piece.prepared if piece.prepared is not None else state.members[piece.member]
            own, own_prep = for_member(inner, prepared)
            t0 = time.perf_counter()
            error, partial = None, None
            try:
                path = state.paths.get(piece.member, "")
                if own.needs_box:   # refused here for the member alone (the task wrapper refuses a whole task)
                    check_boxes(piece.block.box, piece.block.frames, path, own.name)
                kept = prepared.state.kept if own is not inner else tuple(range(_n_analyses(inner)))
                boxless = _boxless(own, piece.block, path, kept)
                if boxless:   # a frame without a box: the analyses that need one refuse the member, the others go on
                    base, kept = kept, tuple(k for k in kept if k not in boxless)
                    own, own_prep = kept_group(inner, kept), kept_state(own_prep, base, kept)
                partial = own.map(piece.block, own_prep)
                if own is not inner:
                    partial = KeptPartial(kept, partial, boxless)
            except ServerUnreachable:
                raise   # (the server's outage stops the run: no member is at fault)
            except TrajscaleError as exc:
                error = str(exc)
            except (ImportError, MemoryError):
                raise   # (the environment's failure, not the trajectory's)
            except Exception as exc:   # noqa: BLE001 - one trajectory's failure is that trajectory's
                error = f"{state.paths.get(piece.member, '')}: {type(exc).__name__}: {exc}"
            out[piece.member] = MemberPartial(partial, piece.n_frames, piece.t_read, piece.t_open,
                                              time.perf_counter() - t0, piece.nbytes, int(piece.t_open > 0), error,
                                              piece.prepared, piece.t_prepare, _atoms_read(piece.block),
                                              piece.frame_work_s)
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
        if error is not None or not ok:
            partial = None
        elif len(ok) == 1:
            partial = ok[0]
        elif any(isinstance(p, KeptPartial) for p in ok):   # some analyses refused it: the others' reduce
            partial = _kept_reduce(self.analysis, ok)
            if partial is None:
                error = "; ".join(dict.fromkeys(why for p in ok if isinstance(p, KeptPartial)
                                                for why in p.refused.values())) or "every analysis refused it"

        else:
            partial = self.analysis.reduce(ok)
        return MemberPartial(partial, sum(p.frames for p in parts), sum(p.t_read for p in parts),
                             sum(p.t_open for p in parts), sum(p.t_compute for p in parts),
                             sum(p.nbytes for p in parts), sum(p.opens for p in parts), error,
                             next((p.prepared for p in parts if p.prepared is not None), None),
                             sum(p.t_prepare for p in parts), max(p.atoms for p in parts),
                             max(p.frame_work_s for p in parts))

    def result(self, reduced: EnsemblePartial, prep: Prepared) -> EnsembleOutcome:
        return EnsembleOutcome(reduced if isinstance(reduced, EnsemblePartial) else EnsemblePartial())

    def get_config(self) -> dict:
        return {"name": self.name, "analysis": self.analysis.get_config()}


def _n_analyses(analysis: Analysis) -> int:
    return len(analysis.analyses) if isinstance(analysis, AnalysisGroup) else 1


def _boxless(own: Analysis, block, path: str, kept: tuple[int, ...]) -> dict[int, str]:
    """The analyses of a member's group (``own``, at ``kept`` in the run) that need a box a frame of
    ``block`` lacks, by position, with why; empty when all or none can map it (none: refused whole)."""
    if not isinstance(own, AnalysisGroup) or not any(a.needs_box for a in own.analyses):
        return {}
    out = {}
    for k, a in zip(kept, own.analyses, strict=True):
        if a.needs_box:
            try:
                check_boxes(block.box, block.frames, path, a.name)
            except TrajscaleError as exc:
                out[k] = " ".join(str(exc).split())
    return {} if len(out) == len(kept) else out


def kept_state(prep: Prepared, base: tuple[int, ...], kept: tuple[int, ...]) -> Prepared:
    """The preparation of the group of the run's analyses at ``kept`` from that of the group at ``base`` (which
    holds them): each analysis's own, the block read as before (the same atoms)."""
    from ..analysis.group import GroupState

    s: GroupState = prep.state
    js = [base.index(k) for k in kept]
    return Prepared(prep.atoms, GroupState(tuple(s.prepared[j] for j in js), tuple(s.views[j] for j in js), s.path))


def _positions(partial, n: int) -> tuple[tuple[int, ...], object, Mapping[int, str]]:
    """A member's partial as (the run's positions it holds, its group's partial, why the others were left out)."""
    if isinstance(partial, KeptPartial):
        return partial.kept, partial.partial, partial.refused
    return tuple(range(n)), partial, {}


def _kept_reduce(run: AnalysisGroup, partials: list):
    """Partials of one member that hold different analyses (one piece lacked a box) reduced over the analyses
    every one of them holds, each by its own ``reduce``."""
    from ..analysis.group import GroupPartial

    n = _n_analyses(run)
    held = [_positions(p, n) for p in partials]
    common = tuple(k for k in held[0][0] if all(k in h[0] for h in held))
    refused: dict[int, str] = {}
    for _, _, r in held:
        for k, why in r.items():
            refused.setdefault(k, why)
    projected = []
    for kept, gp, _ in held:
        where = [kept.index(k) for k in common]
        projected.append(GroupPartial(tuple(gp.partials[j] for j in where), tuple(gp.seconds[j] for j in where)))
    if not common:   # (each piece kept analyses another refused: none holds every frame)
        return None
    if len(common) == n:
        return run.reduce(projected)
    return KeptPartial(common, kept_group(run, common).reduce(projected), refused)


def _atoms_read(block) -> int:
    """The atoms a member's block holds (what a frame of it was read with)."""
    arrays = [getattr(block, k, None) for k in ("positions", "velocities", "forces")]
    return next((int(a.shape[1]) for a in arrays if a is not None and a.ndim == 3), 0)


__all__ = ["EnsembleAnalysis", "EnsembleOutcome", "EnsemblePartial", "EnsembleState", "KeptPartial",
           "MemberPartial", "SomeRefused", "for_member", "kept_state", "prepare_each"]
