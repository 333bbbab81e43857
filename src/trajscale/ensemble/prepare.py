"""Preparing an ensemble's members, each on its own topology, or refusing it with the reason.

The process that prepares the job (the root) opens each member's trajectory once (its frame count,
its Source's config for the workers), resolves the analysis's selections on the member's own
topology (the parsed topology and the selections come from trajscale's caches when the same file was
seen before: members that share a topology file share that work) and takes its reference, as a run
over that trajectory alone would.  A member that cannot be prepared (a missing or unreadable file, a
selection that picks nothing in it, a frame range it does not have) is refused, named, with the
reason; the others go on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..analysis.base import Analysis, Prepared
from ..engine import frame_range
from ..errors import TrajscaleError
from ..planning import AnalysisTopology
from ..runspec import RunOptions
from ..sources import Source, open_source, source_from_config
from .catalog import Member
from .source import MemberRead

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refusal:
    """A member that was not analysed: its index in the ensemble, the member, and why."""

    index: int
    member: Member
    reason: str

    def row(self) -> dict:
        """Its catalog row and the reason (a row of the refused table)."""
        return {**self.member.row(), "reason": self.reason}


@dataclass(frozen=True)
class MemberJob:
    """A prepared member, on the root: how workers read it, its preparation, and what a frame costs.

    Attributes
    ----------
    index, member
        Its place in the ensemble, and the member.
    read
        How a worker reads it (its ``offset`` set when the job's axis is laid out).
    prepared
        The wrapped analysis's preparation on its topology.
    frame_bytes
        Bytes a frame costs in its reader's buffers, plus the bytes per frame the analysis holds beside.
    decode_s
        Seconds a frame costs to decode beyond its bytes (XTC).
    cost
        The work its analyses declare per frame (:class:`~trajscale.analysis.base.FrameCost`).
    remote
        It is read from behind a URL.
    t_prepare
        Seconds preparing it took here.
    """

    index: int
    member: Member
    read: MemberRead
    prepared: Prepared
    frame_bytes: int
    decode_s: float = 0.0
    cost: object = None
    remote: bool = False
    t_prepare: float = 0.0

    @property
    def n(self) -> int:
        return self.read.n


def open_member(member: Member, options: RunOptions) -> Source:
    """The Source that reads ``member`` (its expander's config, or its trajectory as ``trajscale.run`` opens it)."""
    if member.source is not None:
        return source_from_config(dict(member.source))
    return open_source(member.run_trajectory(), member.topology, group=options.group,
                       assume_units=options.assume_units, continuous=options.continuous)


class SharedTopologies:
    """Members whose topology is the same file share its selections.

    A topology's selections are answered from trajscale's selection cache when the file and the selection were
    seen before (:class:`~trajscale.topology.CachedUniverse`): those answers come from the file alone, not from
    any trajectory's coordinates, so the next member with that file is prepared on the same object (no lookup
    of the cache again).  A member whose preparation needed the real Universe (a selection by distance, one not
    cached yet) is prepared on a Universe of its own, with its own first frame.
    """

    def __init__(self) -> None:
        self._shared: dict[str, object] = {}

    def prepare(self, analysis: Analysis, topology: str | None, source: Source) -> Prepared:
        from ..topology import CachedUniverse

        own = source.own_universe() if topology is None else None
        if own is not None:   # a Source that carries its own topology (an mdCATH member's PDB text, ...)
            return analysis.prepare(AnalysisTopology(own, source).atoms, source)
        shared = self._shared.get(topology) if topology is not None else None
        if shared is not None and shared.atoms.n_atoms == source.n_atoms:
            prep = analysis.prepare(shared, source)
            if shared.t_build == 0:
                return prep
            del self._shared[topology]   # it built a Universe of another member's frame: prepared again alone
        top = AnalysisTopology(topology, source)
        prep = analysis.prepare(top.atoms, source)
        if topology is not None and isinstance(top.atoms, CachedUniverse) and top.atoms.t_build == 0:
            self._shared[topology] = top.atoms
        return prep


def prepare_member(index: int, member: Member, analysis: Analysis, options: RunOptions,
                   topologies: SharedTopologies | None = None) -> MemberJob:
    """``member`` prepared for ``analysis`` (the Source opened to prepare it is closed after).

    Raises whatever makes the member unusable (a TrajscaleError naming its file and the problem, or a
    library's error for a damaged file)."""
    from ..util import is_url

    t0 = time.perf_counter()
    source = open_member(member, options)
    try:
        start, stop = frame_range(options.start, options.stop, source.n_frames, source.path)
        frames = range(start, stop, options.step)
        prep = (topologies or SharedTopologies()).prepare(analysis, member.topology, source)
        frame_bytes = source.bytes_per_frame(prep.atoms, analysis.fields) + analysis.block_bytes_per_frame(prep)
        read = MemberRead(member=index, offset=0, n=len(frames), start=start, step=options.step,
                          source=source.get_config(), atoms=prep.atoms, path=source.path)
        remote = any(is_url(t) for t in member.trajectory)
        return MemberJob(index, member, read, prep, int(frame_bytes), source.decode_seconds_per_frame(),
                         analysis.frame_cost(prep, source), remote, time.perf_counter() - t0)
    finally:
        source.close()


def prepare_members(members: list[tuple[int, Member]], analysis: Analysis, options: RunOptions,
                    topologies: SharedTopologies | None = None) -> tuple[list[MemberJob], list[Refusal]]:
    """Each of ``members`` (``(index, member)``) prepared, or refused with the reason; ``topologies``: what
    members prepared before share with these."""
    jobs, refused = [], []
    topologies = topologies if topologies is not None else SharedTopologies()
    for index, member in members:
        try:
            jobs.append(prepare_member(index, member, analysis, options, topologies))
        except TrajscaleError as exc:
            refused.append(Refusal(index, member, _one_line(str(exc))))
        except (KeyboardInterrupt, SystemExit, ImportError, MemoryError):
            raise   # (the environment's failure, not the trajectory's)
        except Exception as exc:   # noqa: BLE001 - a damaged file's library error refuses that member only
            refused.append(Refusal(index, member, _one_line(f"{member.location}: {type(exc).__name__}: {exc}")))
    return jobs, refused


def _one_line(text: str) -> str:
    return " ".join(text.split())


__all__ = ["MemberJob", "Refusal", "SharedTopologies", "open_member", "prepare_member", "prepare_members"]
