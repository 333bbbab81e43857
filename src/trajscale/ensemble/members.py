"""What preparing a member needs wherever it is prepared: its Source opened, the topologies members share,
and (for a member a worker prepares) the plain values that say how.

A worker prepares a short member with the same functions as the root prepares a long one, so that its
preparation, and so its results, have the same bits.
"""

from __future__ import annotations

import threading

from ..analysis.base import Analysis, Prepared
from ..engine import Preparation, frame_range, prepare_analysis
from ..planning import AnalysisTopology
from ..runspec import RunOptions
from ..sources import Source, open_source, source_from_config
from ..storage.location import Location
from .analysis import for_member, prepare_each
from .catalog import Member

#: The topology caches are one per process: threads of one process prepare members one at a time.
_PREPARING = threading.Lock()


def open_member(member: Member, options: RunOptions) -> Source:
    """The Source that reads ``member`` (its expander's config, or its trajectory as ``trajscale.run`` opens it):
    its files meet the run's storage options here, on the root or in the worker its task went to."""
    if member.source is not None:
        return source_from_config(dict(member.source))
    where = [Location(t, options.storage_options) for t in member.trajectory]
    return open_source(where if len(where) > 1 else where[0], member.topology, group=options.group,
                       assume_units=options.assume_units, continuous=options.continuous)


class SharedTopologies:
    """Members whose topology is the same file are prepared on one cached object; one whose preparation needed
    the real Universe (a selection by distance) gets a Universe of its own, with its own first frame."""

    #: The analysis that maps a member's frames and its preparation: the run's, or the group of those that kept it.
    runs = staticmethod(for_member)

    def __init__(self, run: RunOptions | None = None) -> None:
        self._shared: dict[str, object] = {}
        self._at_hand: dict[str, object] = {}   # (topology -> the file parsed, held in use while members share it)
        self._options = run.storage_options if run else None   # (a topology behind a URL: the run's options)

    def prepare(self, analysis: Analysis, topology: str | None, source: Source) -> Prepared:
        from ..topology import CachedUniverse

        if topology is not None:   # (an object's: the node's copy, fetched once, read with the run's options)
            held = self._at_hand.get(topology)
            if held is None:
                held = self._at_hand[topology] = Location(topology, self._options)
                if held.costs_request:
                    from ..storage.nodecache import at_hand

                    held = self._at_hand[topology] = at_hand(held)
            topology = held.where if isinstance(held, Location) else held.path
        own = source.own_universe() if topology is None else None
        if own is not None:   # a Source that carries its own topology (an mdCATH member's PDB text, ...)
            return prepare_each(analysis, AnalysisTopology(own, source).atoms, source)
        shared = self._shared.get(topology) if topology is not None else None
        if shared is not None and shared.atoms.n_atoms == source.n_atoms:
            prep = prepare_each(analysis, shared, source)
            if shared.t_build == 0:
                return prep
            del self._shared[topology]   # it built a Universe of another member's frame: prepared again alone
        top = AnalysisTopology(topology, source)
        prep = prepare_each(analysis, top.atoms, source)
        if topology is not None and isinstance(top.atoms, CachedUniverse) and top.atoms.t_build == 0:
            self._shared[topology] = top.atoms
        return prep


def member_spec(member: Member, options: RunOptions) -> dict:
    """What a worker needs to open and prepare ``member`` itself: plain values (a config's)."""
    return {"name": member.name, "trajectory": list(member.trajectory), "topology": member.topology,
            "source": dict(member.source) if member.source is not None else None, "start": options.start,
            "stop": options.stop, "step": options.step, "group": options.group,
            "assume_units": options.assume_units, "continuous": options.continuous,
            "storage_options": options.storage_options}


def open_spec(spec: dict) -> Source:
    """The Source of a member a worker prepares (:func:`member_spec`), opened as the root would open it."""
    member = Member.made(spec["name"], tuple(spec["trajectory"]), spec["topology"], {}, spec["source"])   # (located)
    return open_member(member, RunOptions(
        start=spec["start"], stop=spec["stop"], step=spec["step"], group=spec["group"],
        assume_units=spec["assume_units"], continuous=spec["continuous"], storage_options=spec["storage_options"]))


def prepare_opened(spec: dict, analysis: Analysis, source: Source, opened) -> tuple[Preparation, range]:
    """A member a worker prepares (:func:`member_spec`), on its open ``source``, by the root's own preparation
    (:func:`~trajscale.engine.prepare_analysis`); ``opened``: the thread's open members, sharing topologies."""
    start, stop = frame_range(spec["start"], spec["stop"], source.n_frames, source.path)
    with _PREPARING:
        if opened.topologies is None:
            opened.topologies = SharedTopologies(RunOptions(storage_options=spec["storage_options"]))
        reuse, source.reuse_buffers = source.reuse_buffers, False   # a reference frame is kept: its own arrays
        try:
            prep = prepare_analysis(analysis, spec["topology"], source, opened.topologies)
        finally:
            source.reuse_buffers = reuse
    return prep, range(start, stop, spec["step"])


__all__ = ["SharedTopologies", "member_spec", "open_member", "open_spec", "prepare_opened"]
