"""Several analyses in one pass over the trajectory, as cpptraj runs the actions of one input.

Each analysis maps a contiguous copy of exactly the atoms it reads alone, so its result has the same bits as
alone; one whose kernel gathers its atoms itself (the RDF) defines ``map_view(block, prep, view)``, which skips
the copy.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..block import Block
from ..errors import ConfigError, TrajscaleError
from .base import Analysis, FrameCost, FrameRows, Prepared, analysis_from_config, check_boxes

#: A pass's blocks: at most this many bytes read at once (L3-cache sized), whatever larger budget the run has.
PASS_BLOCK_BYTES = 32 * 2**20


@dataclass(frozen=True, eq=False)
class GroupState:
    """What every worker holds of a group's preparation: each analysis's own, and the positions of its atoms
    within the union block (None: the union itself, mapped with no copy)."""

    prepared: tuple[Prepared, ...]
    views: tuple[np.ndarray | None, ...]
    path: str = ""   # the trajectory, for the errors of a frame without a box


@dataclass(frozen=True, slots=True, eq=False)
class GroupPartial:
    """The partial of a group: each analysis's own partial, in the group's order, and the seconds its
    ``map`` and ``reduce`` took (summed over blocks, tasks and workers)."""

    partials: tuple
    seconds: tuple[float, ...]


class AnalysisGroup(Analysis):
    """Several analyses run in one pass: each block read once over the union of their atoms.

    Parameters
    ----------
    analyses
        Two or more analyses (one is allowed); ``result`` gives their results in this order.
    """

    per_frame = False

    def __init__(self, analyses: Sequence[Analysis]) -> None:
        # (rebuilt on a worker from its config: the analyses' own configs)
        analyses = [analysis_from_config(a) if isinstance(a, dict) else a for a in analyses]
        if not analyses:
            raise ConfigError("trajscale.run got an empty list of analyses: give at least one")
        bad = [a for a in analyses if not isinstance(a, Analysis)]
        if bad:
            raise ConfigError(f"trajscale.run takes analyses (trajscale.RMSD(...), ...); got "
                              f"{', '.join(type(b).__name__ for b in bad)} in the list")
        if any(isinstance(a, AnalysisGroup) for a in analyses):
            raise ConfigError("a list of analyses holds analyses, not other lists")
        self.analyses = tuple(analyses)
        self.name = "+".join(a.name for a in analyses)
        self.fields = tuple(dict.fromkeys(f for a in analyses for f in a.fields))

    @property
    def selections(self) -> tuple[str, ...]:
        """Every analysis's selections, each once, in the group's order (the union the run reads)."""
        if any(not a.selections for a in self.analyses):
            return ()   # one analysis reads all atoms: so does the group
        return tuple(dict.fromkeys(s for a in self.analyses for s in a.selections))

    @property
    def trajectory_frame(self) -> int | None:
        """The latest reference frame any analysis reads, or one counted from the end (which a followed
        run refuses, naming the analysis: :meth:`refuse_unwritten`)."""
        frames = [f for f in (a.trajectory_frame for a in self.analyses) if f is not None]
        if not frames:
            return None
        return min(frames) if min(frames) < 0 else max(frames)

    @property
    def cache_block_bytes(self) -> int | None:
        """The most bytes a block of two or more analyses holds: they traverse each block in turn, and a block
        the processor's cache keeps is read from memory once.  None for one analysis."""
        return PASS_BLOCK_BYTES if len(self.analyses) > 1 else None

    def get_config(self) -> dict:
        return {"name": "group", "analyses": [a.get_config() for a in self.analyses]}

    def prepare(self, universe, source) -> Prepared:
        """Each analysis prepares as it would alone; the union of their atoms is read.  An analysis
        that needs a box it would not find refuses the whole run here, before any frame is mapped."""
        prepared = tuple(_prepared(a, universe, source) for a in self.analyses)
        boxed = [a for a in self.analyses if a.needs_box]
        if boxed:
            _check_first_box(source, boxed)
        if any(p.atoms is None or _every_atom(p.atoms, source.n_atoms) for p in prepared):
            union = None   # (no union of lists to make when one of them is every atom)
        else:
            union = functools.reduce(np.union1d, [np.asarray(p.atoms) for p in prepared])
            if len(union) == source.n_atoms:   # every atom: whole frames, with no list of atoms to plan each read
                union = None
        views = tuple(_view_of(p.atoms, union, source.n_atoms) for p in prepared)
        return Prepared(atoms=union, state=GroupState(prepared, views, str(source.path or "")))

    def block_bytes_per_frame(self, prep: Prepared) -> int:
        """What the most demanding analysis holds per frame while it maps (one maps at a time): its copy of
        its atoms and what its own ``map`` holds beyond the block."""
        s: GroupState = prep.state
        return max((0 if v is None or hasattr(a, "map_view") else len(v) * 12 * len(a.fields))
                   + a.block_bytes_per_frame(p) for a, p, v in zip(self.analyses, s.prepared, s.views, strict=True))

    def frame_cost(self, prep: Prepared, source) -> FrameCost:
        """Its analyses' costs together (each maps the block in turn), each on its own atoms."""
        s: GroupState = prep.state
        return sum((a.frame_cost(p, source) for a, p in zip(self.analyses, s.prepared, strict=True)), FrameCost())

    def map(self, block: Block, prep: Prepared) -> GroupPartial:
        s: GroupState = prep.state
        partials, seconds = [], []
        for a, p, view in zip(self.analyses, s.prepared, s.views, strict=True):
            t0 = time.perf_counter()
            if a.needs_box:   # (a box is the frame's, whatever its atoms)
                check_boxes(block.box, block.frames, s.path, a.name)
            if view is None:
                partials.append(a.map(block, p))
            elif hasattr(a, "map_view"):   # it gathers its atoms from the block itself: no copy
                partials.append(a.map_view(block, p, view))
            else:
                own = _atoms_of(block, view)
                partials.append(a.map(own, p))
                del own
            seconds.append(time.perf_counter() - t0)
        return GroupPartial(tuple(partials), tuple(seconds))

    def reduce(self, partials: list) -> GroupPartial:
        """Each analysis's partials reduced by its own ``reduce``, in the order given."""
        parts = [p for p in partials if p is not None]
        if not parts:
            return GroupPartial(tuple(a.reduce([]) for a in self.analyses), (0.0,) * len(self.analyses))
        if len(parts) == 1:
            return parts[0]
        reduced, seconds = [], []
        for i, a in enumerate(self.analyses):
            t0 = time.perf_counter()
            # a partial of no frames (an MPI rank without tasks reduces none) is left out, as a run of the
            # analysis alone leaves it out
            reduced.append(a.reduce([p.partials[i] for p in parts if not _empty(p.partials[i])]))
            seconds.append(sum(p.seconds[i] for p in parts) + time.perf_counter() - t0)
        return GroupPartial(tuple(reduced), tuple(seconds))

    def result(self, reduced: GroupPartial, prep: Prepared) -> list:
        """Each analysis's result, in the group's order."""
        s: GroupState = prep.state
        return [a.result(r, p) for a, r, p in zip(self.analyses, reduced.partials, s.prepared, strict=True)]


def _prepared(analysis: Analysis, universe, source) -> Prepared:
    """``analysis.prepare``; its error (a selection of no atoms, a topology without masses) names it."""
    try:
        return analysis.prepare(universe, source)
    except TrajscaleError as exc:
        exc.args = (f"{analysis.name}: {exc}",)   # what the one line says (the error keeps its type)
        raise


def _empty(partial) -> bool:
    """A partial of no frames: what reducing none gives (None, an empty dict or FrameRows)."""
    return partial is None or (isinstance(partial, dict | list | tuple | FrameRows) and len(partial) == 0)


def _every_atom(atoms, n_atoms: int) -> bool:
    """Whether the sorted, distinct atom indices ``atoms`` (a ``Prepared.atoms``) are all ``n_atoms`` atoms."""
    atoms = np.asarray(atoms)
    return len(atoms) == n_atoms and (n_atoms == 0 or (atoms[0] == 0 and atoms[-1] == n_atoms - 1))


def _view_of(atoms, union, n_atoms: int) -> np.ndarray | None:
    """Positions of ``atoms`` within a block read over ``union`` (None: all atoms); None when they are
    the union itself, in its order."""
    if atoms is None:   # all atoms: then the union is all atoms too
        return None
    atoms = np.asarray(atoms)
    if union is None:
        if len(atoms) == n_atoms and np.array_equal(atoms, np.arange(n_atoms)):
            return None
        return atoms.astype(np.intp)
    if atoms is union or len(atoms) == len(union) and np.array_equal(atoms, union):   # (one analysis's: itself)
        return None
    return np.searchsorted(union, atoms).astype(np.intp)


def _atoms_of(block: Block, view: np.ndarray) -> Block:
    """``block`` for the atoms at ``view``: per-atom arrays copied, contiguous, in ``view``'s order."""
    take = {k: np.take(getattr(block, k), view, axis=1) for k in ("positions", "velocities", "forces")
            if getattr(block, k) is not None}
    return dataclasses.replace(block, **take)


def _check_first_box(source, boxed: list[Analysis]) -> None:
    """The first frame's box (its header's where it has one), checked for each analysis that needs one."""
    if not source.n_frames:
        return
    box = source.frame_header(0)[2]
    for a in boxed:
        check_boxes(box, np.zeros(1, np.intp), str(source.path or ""), a.name)


__all__ = ["AnalysisGroup", "GroupPartial", "GroupState"]
