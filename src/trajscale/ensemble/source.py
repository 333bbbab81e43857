"""An ensemble's trajectories as one Source: every member's analysed frames, one after the other.

The run engine and every executor run tasks over one Source's frames, so an ensemble is given to them as
:class:`EnsembleSource`: a frame axis on which member ``i``'s analysed frames occupy
``[offset_i, offset_i + n_i)``.  A task is a range of that axis (part of one long trajectory, or several
short ones whole); its read returns an :class:`EnsembleBlock` of the pieces of the members it covers, each
read from its member's own Source with that member's atoms and frame numbers.

A member's Source is opened by the worker whose task first reads it, kept among the thread's few open ones
(:mod:`.opened`) under the job's token and its index.  A piece that cannot be read is handed on as the reason,
so that only its trajectory is refused.  The config lists only the members of the job it reads, and a token
that names the job: two jobs never share a Source by accident.
"""

from __future__ import annotations

import base64
import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from ..block import Block
from ..errors import ConfigError, FrameRangeError, ServerUnreachable, TrajscaleError
from ..facts import LayoutFacts
from ..sources.base import Source
from .opened import MAX_OPEN, close_member_sources, member_sources
from .traits import ENSEMBLE


@dataclass(frozen=True, eq=False)
class MemberRead:
    """How a worker reads one member: its analysed frames occupy ``[offset, offset + n)`` of the ensemble's
    axis and are frames ``start, start + step, ...`` of its own trajectory.  A member the worker prepares
    (``spec``: :func:`~trajscale.ensemble.members.member_spec`) is one position of the axis, whose read
    opens, prepares and reads it whole (``source`` and ``atoms`` unused)."""

    member: int                 # its index in the ensemble
    offset: int
    n: int
    start: int
    step: int
    source: dict                # its Source's config (reopened on the worker)
    atoms: np.ndarray | None    # its analyses' atoms (indices into its trajectory), None for all
    path: str                   # its trajectory, for messages
    spec: dict | None = None

    def __post_init__(self) -> None:
        if isinstance(self.atoms, str):   # as a config carries them
            raw = base64.b64decode(self.atoms)
            object.__setattr__(self, "atoms", np.frombuffer(raw, "<i4").astype(np.int64))

    def to_dict(self) -> dict:
        """Plain values for a config: the atoms as base64 text of little-endian int32."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.atoms is not None:
            d["atoms"] = base64.b64encode(np.asarray(self.atoms, "<i4").tobytes()).decode()
        return d

    def frames(self, a: int, b: int) -> tuple[int, int]:
        """Its own trajectory's ``[start, stop)`` (read with ``step``) for axis positions ``[a, b)`` within it."""
        return self.start + a * self.step, self.start + (b - 1) * self.step + 1


@dataclass(frozen=True, eq=False)
class Piece:
    """One member's frames of an ensemble block: its ``block`` (frames numbered as in its own trajectory),
    or why it could not be read (``error``), with what reading it cost; a member prepared by the worker
    has its preparation (``prepared``), the seconds it took and what a frame of it costs (``frame_work_s``,
    priced as the root prices the members it prepares)."""

    member: int
    block: Block | None
    error: str | None = None
    t_read: float = 0.0
    t_open: float = 0.0
    nbytes: int = 0
    n_frames: int = 0
    prepared: object = None
    t_prepare: float = 0.0
    frame_work_s: float = 0.0


@dataclass(frozen=True, eq=False)
class EnsembleBlock:
    """Axis positions ``[start, stop)`` of an ensemble: the pieces of the members they cover, in order.

    A piece's arrays may be its member Source's reused buffer: valid until the next read."""

    start: int
    stop: int
    pieces: tuple[Piece, ...]

    @property
    def n_frames(self) -> int:
        return self.stop - self.start


class EnsembleSource(Source):
    """The frames of ``members`` (:class:`MemberRead`, or their dicts), one member after another on one axis,
    for the job ``token`` names.  ``reads_ahead``: some member's bytes are behind a URL (:meth:`prefetch`).
    ``frame_bytes``, ``n_atoms``, ``decode_s``: the most a member's frame costs in its reader's buffers,
    atoms and seconds decoding (what sizes the blocks and weighs the run).  ``analysis``: the analyses'
    config, for the members a worker prepares (None: all prepared on the root)."""

    traits = ENSEMBLE

    def __init__(self, members: Sequence[MemberRead | dict], token: str, origin: str = "", max_open: int = MAX_OPEN,
                 reads_ahead: bool = False, frame_bytes: int = 0, n_atoms: int = 0, decode_s: float = 0.0,
                 analysis: dict | None = None) -> None:
        self.members = tuple(m if isinstance(m, MemberRead) else MemberRead(**m) for m in members)
        self.token, self.origin, self.max_open = token, origin, int(max_open)
        self._reads_ahead, self._frame_bytes, self._n_atoms = bool(reads_ahead), int(frame_bytes), int(n_atoms)
        self._decode_s = float(decode_s)
        self._analysis_config, self._analysis = analysis, None
        self._offsets = [m.offset for m in self.members]
        self._first = self._offsets[0] if self.members else 0
        self._end = self.members[-1].offset + self.members[-1].n if self.members else 0

    # -- what the run engine and the task wrapper ask --------------------------------------------------------
    @property
    def path(self) -> str:
        return self.origin or "the ensemble"

    @property
    def n_frames(self) -> int:
        return self._end

    @property
    def n_atoms(self) -> int:
        """The most atoms a member's frame is read with."""
        return self._n_atoms

    @property
    def part_starts(self) -> tuple[int, ...]:
        return tuple(o for o in self._offsets if o > 0)

    @property
    def reads_ahead(self) -> bool:
        return self._reads_ahead

    def bytes_per_frame(self, atoms=None, fields=("position",)) -> int:
        """The most bytes a member's frame costs in its reader's buffers (what sizes the blocks)."""
        return self._frame_bytes

    @property
    def bytes_read(self) -> int:
        return member_sources().bytes_read

    @property
    def opens(self) -> int:
        return member_sources().opens

    @property
    def opened(self) -> None:
        """None: the members a task opens are counted (:attr:`opens`), not listed (thousands of paths)."""
        return None

    def remote_stats(self) -> dict | None:
        return member_sources().remote_stats()   # (each member's Source says what its network cost: None for a file)

    def get_config(self) -> dict:
        return {"kind": self.kind, "members": [m.to_dict() for m in self.members], "token": self.token,
                "origin": self.origin, "max_open": self.max_open, "reads_ahead": self._reads_ahead,
                "frame_bytes": self._frame_bytes, "n_atoms": self._n_atoms, "decode_s": self._decode_s,
                "analysis": self._analysis_config}

    def decode_seconds_per_frame(self) -> float:
        return self._decode_s

    def layout_summary(self) -> LayoutFacts:
        return LayoutFacts(format="ensemble", path=self.path, n_atoms=self._n_atoms)

    def close(self) -> None:
        """Close every member trajectory this process's threads hold open (the executor is closing)."""
        close_member_sources()

    # -- reads ------------------------------------------------------------------------------------------------
    def _key(self, m: MemberRead) -> tuple[str, int]:
        """What tells a member's Source apart among a worker's open ones: this job's token and the member's index."""
        return self.token, m.member

    def _spans(self, start: int, stop: int):
        """``(k, a, b)``: member ``k`` of this source covers axis positions ``[a, b)`` of its own frames."""
        if not self._first <= start <= stop <= self._end:
            raise FrameRangeError(f"{self.path}: positions [{start}, {stop}) outside the ensemble's "
                                  f"[{self._first}, {self._end})")
        k = max(0, bisect.bisect_right(self._offsets, start) - 1)
        while k < len(self.members) and self.members[k].offset < stop:
            m = self.members[k]
            a, b = max(start, m.offset) - m.offset, min(stop, m.offset + m.n) - m.offset
            if b > a:
                yield k, a, b
            k += 1

    def read(self, start: int, stop: int, atoms=None, fields: tuple[str, ...] = ("position",),
             stride: int = 1) -> EnsembleBlock:
        """The pieces of the members covering axis positions ``[start, stop)``; ``atoms`` is not used (each
        member is read with its own)."""
        if stride != 1:
            raise ConfigError("an ensemble's axis holds only the frames analysed: it is read with stride 1")
        opened = member_sources()
        pieces, used = [], set()
        for k, a, b in self._spans(start, stop):
            m = self.members[k]
            used.add(self._key(m))
            pieces.append(self._piece(opened, k, m, a, b, fields))
        opened.drop_buffers(used)
        return EnsembleBlock(start, stop, tuple(pieces))

    def _piece(self, opened, k: int, m: MemberRead, a: int, b: int, fields) -> Piece:
        t0 = time.perf_counter()
        t_open = 0.0
        try:
            if m.spec is not None:
                return self._prepared_here(opened, k, m, fields)
            src, t_open = opened.get(self._key(m), m.source, self.max_open)
            before = src.bytes_read
            fs, fe = m.frames(a, b)
            block = src.read(fs, fe, m.atoms, fields, stride=m.step)
            return Piece(m.member, block, None, time.perf_counter() - t0 - t_open, t_open, src.bytes_read - before,
                         b - a)
        except ServerUnreachable:
            raise   # (the server's outage stops the run: no member is at fault)
        except TrajscaleError as exc:
            return Piece(m.member, None, str(exc), time.perf_counter() - t0 - t_open, t_open, 0, b - a)
        except (ImportError, MemoryError):
            raise   # (the environment's failure, not the trajectory's)
        except Exception as exc:   # noqa: BLE001 - a damaged file's library error refuses its trajectory only
            return Piece(m.member, None, f"{m.path}: {type(exc).__name__}: {exc}",
                         time.perf_counter() - t0 - t_open, t_open, 0, b - a)

    def _prepared_here(self, opened, k: int, m: MemberRead, fields) -> Piece:
        """A member this worker prepares: opened (kept among the thread's open ones), prepared on its own
        topology, and its analysed frames read whole."""
        from .members import open_spec, prepare_opened
        from .plan import per_frame_work

        t0 = time.perf_counter()
        src, t_open = opened.get(self._key(m), {}, self.max_open, opener=lambda: open_spec(m.spec))
        if self._analysis is None:
            from ..analysis.base import analysis_from_config

            self._analysis = analysis_from_config(self._analysis_config)
        t1 = time.perf_counter()
        prep, frames = prepare_opened(m.spec, self._analysis, src, opened)
        t_prepare = time.perf_counter() - t1
        if not len(frames):
            raise ConfigError(f"{m.path}: no frame was analysed (frames {frames.start}:{frames.stop}:{frames.step})")
        before = src.bytes_read
        block = src.read(frames.start, frames[-1] + 1, prep.prepared.atoms, fields, stride=frames.step)
        return Piece(m.member, block, None, time.perf_counter() - t0 - t_open - t_prepare, t_open,
                     src.bytes_read - before, len(frames), prep.prepared, t_prepare,
                     per_frame_work(prep.frame_bytes + prep.held_bytes, src.decode_seconds_per_frame(), prep.cost))

    def prefetch(self, start: int, stop: int, atoms=None, fields: tuple[str, ...] = ("position",),
                 stride: int = 1) -> None:
        """Members behind URLs start fetching the frames of ``[start, stop)`` now (others: nothing)."""
        if not self._reads_ahead:
            return
        opened = member_sources()
        for k, a, b in self._spans(start, stop):
            m = self.members[k]
            if m.spec is not None:
                continue   # (opened and prepared when read)
            try:
                src, _ = opened.get(self._key(m), m.source, self.max_open)
                fs, fe = m.frames(a, b)
                src.prefetch(fs, fe, m.atoms, fields, stride=m.step)
            except Exception:   # noqa: BLE001 - a hint: the read says what went wrong
                continue


__all__ = ["EnsembleBlock", "EnsembleSource", "MemberRead", "Piece"]
