"""Task planning: how a run's frames are cut into tasks, and the topology its analysis prepares on.

``trajscale.run`` and a followed run (:mod:`trajscale.follow`) plan with the same functions, so a
followed run's tasks fall where a run over the finished file puts them.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np

from .block import FrameRange, sorted_unique, split_frames
from .errors import AtomCountMismatchError
from .topology import CachedUniverse, load_universe

#: Default budget of one block: the frames a worker reads and maps at once, and the size of a task (bigger
#: runs are cut into more tasks); larger buffers cost page faults, smaller ones more reads (docs/benchmarks.md).
MAX_BLOCK_BYTES = 128 * 1024**2
MAX_TASK_BYTES = MAX_BLOCK_BYTES


def plan_tasks(start: int, stop: int, n_tasks: int, align: int, frame_bytes: int,
               n_workers: int = 1, max_task_bytes: int = MAX_TASK_BYTES,
               part_starts: Sequence[int] = ()) -> list[FrameRange]:
    """Split ``[start, stop)`` into at least ``n_tasks`` chunk-aligned ranges of bounded size.

    ``frame_bytes`` is one frame's cost in the reader's buffers.  When the size bound adds tasks, their
    number stays a multiple of ``n_workers`` (so no rank gets more frames than another).  Every part start
    inside the range is a task boundary (:func:`plan_in_parts`)."""
    n = stop - start
    by_size = math.ceil(n * frame_bytes / max_task_bytes)
    if by_size > n_tasks:
        n_tasks = math.ceil(by_size / n_workers) * n_workers
    if n <= 0:
        return []
    lo, hi = bisect.bisect_right(part_starts, start), bisect.bisect_left(part_starts, stop)
    return plan_in_parts([start, *part_starts[lo:hi], stop], n_tasks, align, part_starts[lo - 1] if lo else 0)


def plan_in_parts(edges: Sequence[int], n_tasks: int, align: int = 1, first_part: int = 0) -> list[FrameRange]:
    """About ``n_tasks`` ranges over ``[edges[0], edges[-1])`` whose boundaries include every edge.

    A part at least a task's share long is cut into balanced tasks of its own, on multiples of ``align``
    from ``first_part`` (where the part holding ``edges[0]`` starts); runs of shorter parts are cut only at
    part starts, into tasks of whole parts (:func:`_whole_parts`).  So 10,000 parts of a few frames make
    about ``n_tasks`` tasks, not 10,000, and each part is still opened by one worker only."""
    share = (edges[-1] - edges[0]) / max(1, n_tasks)
    out: list[FrameRange] = []
    run: list[int] = []   # starts of the current run of short parts
    for k, (a, b) in enumerate(itertools.pairwise(edges)):
        length = b - a
        if length < share:
            run.append(a)
            continue
        if run:
            out += _whole_parts([*run, a], share)
            run = []
        origin = a if k else first_part
        al = align if (a - origin) % align == 0 else 1
        out += [FrameRange(a + r.start, a + r.stop) for r in split_frames(length, max(1, round(length / share)), al)]
    if run:
        out += _whole_parts([*run, edges[-1]], share)
    return out


def _whole_parts(edges: Sequence[int], share: float) -> list[FrameRange]:
    """Consecutive short parts as about ``frames / share`` tasks of whole parts, cut at the nearest part starts."""
    e = np.asarray(edges, dtype=np.int64)
    span = int(e[-1] - e[0])
    m = max(1, round(span / share))
    targets = e[0] + span * np.arange(1, m) / m
    i = np.clip(np.searchsorted(e, targets), 1, len(e) - 1)
    below, above = e[i - 1], e[i]
    cuts = sorted_unique(np.concatenate([e[:1], np.where(targets - below <= above - targets, below, above), e[-1:]]))
    return [FrameRange(int(a), int(b)) for a, b in itertools.pairwise(cuts.tolist())]


def plan_strided_tasks(start: int, stop: int, step: int, n_tasks: int, frame_bytes: int,
                       n_workers: int = 1, max_task_bytes: int = MAX_TASK_BYTES,
                       part_starts: Sequence[int] = ()) -> list[FrameRange]:
    """Tasks over frames ``start:stop:step``, each starting on a kept frame and sized by its kept frames (reads
    are strided); a part start becomes a cut before the first kept frame at or after it."""
    kept = len(range(start, stop, step))
    cuts = sorted({-(-(b - start) // step) for b in part_starts if start < b < stop} - {0, kept})
    return [FrameRange(start + r.start * step, start + (r.stop - 1) * step + 1)
            for r in plan_tasks(0, kept, n_tasks, 1, frame_bytes, n_workers, max_task_bytes, cuts)]


def topology_with_first_frame(topology, source):
    """The topology's Universe holding the trajectory's first frame, as ``Universe(top, traj)`` would (selections
    by distance see the trajectory; a TPR is not parsed a second time)."""
    from MDAnalysis.coordinates.memory import MemoryReader

    universe = load_universe(topology, topology_coordinates=False)
    if universe.atoms.n_atoms == source.n_atoms and source.n_frames:
        first = source.read(0, 1)
        box = first.box[0] if first.box[0].any() else None
        universe.load_new(first.positions, format=MemoryReader, order="fac", dimensions=box)
    return universe


def topology_file(topology):
    """The topology file: ``topology`` itself, or the file a Universe or AtomGroup given was built from."""
    return topology.universe.filename if _is_mdanalysis_atoms(topology) else topology


def _is_mdanalysis_atoms(topology) -> bool:
    """True for an MDAnalysis Universe or AtomGroup, told without importing MDAnalysis."""
    return hasattr(topology, "select_atoms")


class AnalysisTopology:
    """What an analysis prepares on, from the topology a run is given and the trajectory it opened.

    ``topology`` is a topology file (or None), an MDAnalysis Universe, or an AtomGroup of one (selections are then
    made within it, as MDAnalysis's analyses take an ``atomgroup``). Otherwise selections come from the selection
    cache when they can, and the Universe is built only if not. Raises AtomCountMismatchError.
    """

    def __init__(self, topology, source) -> None:
        given = topology if _is_mdanalysis_atoms(topology) else None
        self.file = topology_file(topology)
        self._built: CachedUniverse | None = None
        own = source.frames_universe()   # an MDAnalysis reader's Universe: its topology is the run's
        if own is not None:
            universe = own
        elif given is not None:
            universe = given.universe
        elif topology is not None:
            universe = self._built = CachedUniverse(
                str(topology), functools.partial(topology_with_first_frame, topology, source))
        else:
            universe = None
        if universe is not None and universe.atoms.n_atoms != source.n_atoms:
            raise AtomCountMismatchError(
                f"{self.file} has {universe.atoms.n_atoms} atoms but {source.path} has {source.n_atoms}")
        #: What ``Analysis.prepare`` is given: the AtomGroup given, else the Universe (None: no topology).
        self.atoms = given if given is not None and given is not given.universe else universe

    @property
    def build_seconds(self) -> float:
        """Seconds building a Universe from the topology file (0 when not built here)."""
        return self._built.t_build if self._built is not None else 0.0
