"""Preparing an ensemble's members, each on its own topology, or refusing it with the reason.

Preparing a member opens its trajectory once, resolves the analysis's selections on its own topology (members that
share a topology file share that work, through trajscale's caches) and takes its reference, as a run over that
trajectory alone would. A member that cannot be prepared is refused, named, with the reason; the others go on.

A short member is prepared by the worker whose task reads it (:func:`defer_member`, :mod:`.members`): the
root's work per member is then a ``stat``, so a pool starts at once and thousands of members are prepared
in parallel.  A member long enough to be cut into tasks is prepared on the root (:func:`prepare_member`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..analysis.base import Analysis, Prepared
from ..engine import frame_range, prepare_analysis
from ..errors import ServerUnreachable, TrajscaleError
from ..runspec import RunOptions
from .catalog import Member
from .members import SharedTopologies, member_spec, open_member
from .source import MemberRead

log = logging.getLogger(__name__)

#: Bytes a member's analysed frames may take in memory per byte of its files, for a member a worker
#: prepares (its frames are read whole): an XTC's coordinates are about a third of their floats.
WHOLE_BYTES_PER_FILE_BYTE = 4
#: Seconds preparing a short member costs (opening it, its selections on a cached topology, its
#: reference frame): measured in docs/benchmarks.md's ensemble rows, about 2.5 ms on this machine.
PREPARE_S = 2.5e-3



@dataclass(frozen=True)
class Refusal:
    """A member that was not analysed: its index in the ensemble, the member, and why; refused by one analysis
    of several, that analysis's name and position in the run (``position`` None: by every analysis)."""

    index: int
    member: Member
    reason: str
    analysis: str = ""
    position: int | None = None

    def row(self) -> dict:
        """Its catalog row, the analysis that refused it (empty: every analysis) and the reason (a row of the
        refused table)."""
        return {**self.member.row(), "analysis": self.analysis, "reason": self.reason}


@dataclass(frozen=True)
class RefusedResult:
    """What a member's record holds in the place of an analysis that refused the member (its other analyses'
    results beside it): the analysis's name and why."""

    analysis: str
    reason: str


@dataclass(frozen=True, eq=False)
class MemberJob:
    """A prepared member, on the root: how workers read it, its preparation, and what a frame costs."""

    index: int
    member: Member
    read: MemberRead              # its ``offset`` set when the job's axis is laid out
    prepared: Prepared | None     # None: its worker prepares it (:func:`defer_member`)
    frame_bytes: int              # in its reader's buffers, plus what the analysis holds beside per frame
    decode_s: float = 0.0         # seconds a frame costs to decode beyond its bytes (XTC)
    cost: object = None           # the work its analyses declare per frame (a FrameCost)
    reads_ahead: bool = False     # its Source fetches a block ahead (its bytes are behind a URL)
    t_prepare: float = 0.0        # seconds preparing it took here

    @property
    def n(self) -> int:
        return self.read.n


def prepare_member(index: int, member: Member, analysis: Analysis, options: RunOptions,
                   topologies: SharedTopologies | None = None) -> MemberJob:
    """``member`` prepared for ``analysis`` by the engine's one preparation
    (:func:`~trajscale.engine.prepare_analysis`); raises whatever makes the member unusable."""
    t0 = time.perf_counter()
    source = open_member(member, options)
    try:
        start, stop = frame_range(options.start, options.stop, source.n_frames, source.path)
        p = prepare_analysis(analysis, member.topology, source, topologies or SharedTopologies(options))
        read = MemberRead(member=index, offset=0, n=len(range(start, stop, options.step)), start=start,
                          step=options.step, source=source.get_config(), atoms=p.prepared.atoms, path=source.path)
        return MemberJob(index, member, read, p.prepared, p.frame_bytes + p.held_bytes,
                         source.decode_seconds_per_frame(), p.cost, source.reads_ahead, time.perf_counter() - t0)
    finally:
        source.close()


def defer_member(index: int, member: Member, options: RunOptions, whole: int) -> MemberJob:
    """``member`` (its frames ``whole`` bytes read whole) left for the worker that reads it to prepare: one
    position on the ensemble's axis, its work estimated from its size."""
    whole = int(whole)
    read = MemberRead(member=index, offset=0, n=1, start=0, step=1, source={}, atoms=None, path=member.location,
                      spec=member_spec(member, options))
    return MemberJob(index, member, read, None, whole)


def prepare_members(members: list[tuple[int, Member]], analysis: Analysis, options: RunOptions,
                    topologies: SharedTopologies | None = None) -> tuple[list[MemberJob], list[Refusal]]:
    """Each of ``members`` (``(index, member)``) prepared, or refused with the reason; ``topologies``: what
    members prepared before share with these."""
    jobs, refused = [], []
    topologies = topologies if topologies is not None else SharedTopologies(options)
    for index, member in members:
        try:
            jobs.append(prepare_member(index, member, analysis, options, topologies))
        except ServerUnreachable:
            raise   # (the server's outage stops the run: no member is at fault)
        except TrajscaleError as exc:
            refused.append(Refusal(index, member, _one_line(str(exc))))
        except (KeyboardInterrupt, SystemExit, ImportError, MemoryError):
            raise   # (the environment's failure, not the trajectory's)
        except Exception as exc:   # noqa: BLE001 - a damaged file's library error refuses that member only
            refused.append(Refusal(index, member, _one_line(f"{member.location}: {type(exc).__name__}: {exc}")))
    return jobs, refused


def _one_line(text: str) -> str:
    return " ".join(text.split())


__all__ = ["MemberJob", "Refusal", "RefusedResult", "SharedTopologies", "defer_member", "open_member",
           "prepare_member", "prepare_members"]
