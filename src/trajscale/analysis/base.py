"""The Analysis protocol: prepare once, map per block (pure), reduce (associative)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..block import Block
from ..errors import BadCoordinatesError, ConfigError, FrameRangeError, MissingBoxError, TrajscaleError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .options import Command


@dataclass(frozen=True, eq=False)
class Prepared:
    """What ``prepare`` hands to every worker: plain values only.

    Attributes
    ----------
    atoms
        Global indices of the atoms to read (sorted); blocks hold only these.
    state
        Analysis-specific arrays (reference coordinates, indices into ``atoms``),
        as a frozen dataclass of the analysis's own (or a dict).
    """

    atoms: np.ndarray | None
    state: Any = field(default_factory=dict)


@dataclass(frozen=True, slots=True, eq=False)   # (arrays have no single truth value to compare by)
class FrameRows:
    """The partial result of a per-frame analysis: one row per frame, in every array, so any split of the
    frames concatenates (in frame order, as ``reduce`` and the MPI gather do) to the same arrays.

    Attributes
    ----------
    frame
        ``(F,)`` int64: the global frame indices (ascending).
    time
        ``(F,)`` float64: their times, ps.
    columns
        Name -> ``(F, ...)`` array of the analysis's own values (``"rmsd"``, ...); computed arrays, never
        views of a block's reused buffer.
    """

    frame: np.ndarray
    time: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.frame)
        bad = [name for name, a in (("time", self.time), *self.columns.items()) if len(a) != n]
        if bad:
            raise ConfigError(f"per-frame results need one row per frame: {len(self.frame)} frames, but "
                              + ", ".join(f"{name!r} has {len(a)} rows" for name, a in
                                          (("time", self.time), *self.columns.items()) if name in bad))

    def __len__(self) -> int:
        """The frames (rows) held: a record of none is false."""
        return len(self.frame)

    @classmethod
    def empty(cls) -> FrameRows:
        """No frames and no columns (what reducing nothing gives)."""
        return cls(np.empty(0, np.int64), np.empty(0))

    @classmethod
    def of(cls, partial: FrameRows | Mapping[str, np.ndarray]) -> FrameRows:
        """``partial`` as a record: the one place a user's ``{"frame", "time", name: array}`` dict becomes one."""
        if isinstance(partial, FrameRows):
            return partial
        if "frame" not in partial or "time" not in partial:
            raise ConfigError(f"a per-frame partial needs 'frame' and 'time' arrays; it has "
                              f"{', '.join(map(repr, partial)) or 'nothing'}")
        return cls(partial["frame"], partial["time"],
                   {k: v for k, v in partial.items() if k not in ("frame", "time")})

    @classmethod
    def concat(cls, parts: list[FrameRows]) -> FrameRows:
        """``parts`` concatenated in the order given (each column name from the first)."""
        if not parts:
            return cls.empty()
        if len(parts) == 1:   # a serial run's one task: no copy (distances: 2,000 x 60 x 101 doubles)
            return parts[0]
        return cls(np.concatenate([p.frame for p in parts]), np.concatenate([p.time for p in parts]),
                   {k: np.concatenate([p.columns[k] for p in parts]) for k in parts[0].columns})

    def to_dict(self) -> dict[str, np.ndarray]:
        """``{"frame": ..., "time": ..., name: ...}``: every array by name (what MPI gathers)."""
        return {"frame": self.frame, "time": self.time, **self.columns}


@dataclass(frozen=True, slots=True)
class FrameCost:
    """What ``map`` does for one frame, in the units ``executor="auto"`` prices
    (:func:`trajscale.executors.choose_executor`)."""

    atoms: int = 0      # atoms it visits a few times each (a fit, sums, a centre): linear work
    pairs: float = 0.0  # pair distances it computes (an RDF's pairs within reach of each other)

    def __add__(self, other: FrameCost) -> FrameCost:
        return FrameCost(self.atoms + other.atoms, self.pairs + other.pairs)


class Analysis(ABC):
    """Split-apply-combine analysis.

    Subclasses set ``name`` and implement :meth:`prepare`, :meth:`map`, :meth:`reduce`, :meth:`result` and
    :meth:`get_config`.  An analysis object holds only its parameters; it travels as ``get_config()`` and
    is rebuilt on workers with :func:`analysis_from_config`.
    """

    name: str = ""
    #: Per-atom fields the analysis needs from each Block.
    fields: tuple[str, ...] = ("position",)
    #: True when ``map`` returns :class:`FrameRows` (concatenated in frame order by :meth:`reduce`).
    per_frame: bool = True
    #: The extensions its result's ``save`` writes (the extension decides the format).
    formats: tuple[str, ...] = ()
    #: True when its result is labelled features (:class:`~trajscale.analysis.results.Features`), whose
    #: number may differ between topologies: an ensemble's table holds them long.
    features: bool = False
    #: True when ``map`` needs every frame's periodic box: the task wrapper refuses a frame without one
    #: before ``map`` sees it (:func:`check_boxes`). A property where a parameter decides (``pbc``).
    needs_box: bool = False
    #: Its ``trajscale run NAME`` command (help, ``--out`` formats, options: :mod:`.options`); None: an
    #: analysis the command line cannot build (it takes a Python function).
    command: ClassVar[Command | None] = None
    #: The results files (by extension) whose ``save(path, universe=u)`` needs the topology's Universe.
    topology_outputs: tuple[str, ...] = ()

    @property
    def selections(self) -> tuple[str, ...]:
        """The selection strings the analysis reads atoms by, as the user wrote them; empty for all atoms."""
        return ()

    @property
    def trajectory_frame(self) -> int | None:
        """The frame of the analysed trajectory that :meth:`prepare` reads (a reference taken from it;
        negative counts from the end), or None when it reads none: a followed run waits for that frame,
        and refuses one counted from an end not yet written."""
        return None

    @abstractmethod
    def prepare(self, universe, source) -> Prepared:
        """Resolve selections and references (once, on one process)."""

    def frame_cost(self, prep: Prepared, source) -> FrameCost:
        """The work ``map`` does per frame of ``source`` (open); by default linear in the atoms it reads.
        ``executor="auto"`` and the block size (a stop signal is acted on between blocks) weigh a run by it."""
        return FrameCost(atoms=int(source.n_atoms if prep.atoms is None else len(prep.atoms)))

    @property
    def summary_notes(self) -> tuple[str, ...]:
        """Lines the command line prints with a run's summary: what its options decided that its result
        does not show."""
        return ()

    def block_bytes_per_frame(self, prep: Prepared) -> int:
        """Bytes per frame that ``map`` holds beyond the block read (copies of its atoms), counted in
        the block budget; none by default."""
        return 0

    @property
    def cache_block_bytes(self) -> int | None:
        """The most bytes a block may hold whatever larger budget the run has (None: the budget alone)."""
        return None

    @abstractmethod
    def map(self, block: Block, prep: Prepared) -> FrameRows | Any:
        """Partial result for one block; no side effects.

        A per-frame analysis returns :class:`FrameRows` (or a dict :meth:`FrameRows.of` takes); any other
        returns its own partial type and overrides :meth:`reduce`.  The block's arrays may be overwritten by
        the next read once ``map`` returns: a partial holds computed arrays, not views of them.
        """

    def reduce(self, partials: list) -> FrameRows:
        """Combine partials, reduced ones too; the default concatenates per-frame rows in frame order."""
        rows = sorted((FrameRows.of(p) for p in partials if p), key=lambda r: int(r.frame[0]) if len(r) else -1)
        return FrameRows.concat(rows)

    @abstractmethod
    def result(self, reduced: FrameRows | Any, prep: Prepared):
        """Turn the reduced partial into the user-facing result."""

    @abstractmethod
    def get_config(self) -> dict:
        """Parameters as plain values, including ``"name"``."""


class MinimumImage:
    """An analysis whose distances take the minimum image when ``pbc``: it then needs every frame's box."""

    pbc: bool

    @property
    def needs_box(self) -> bool:
        return self.pbc


class OneSelection:
    """An analysis of one selection, ``select``."""

    select: str

    @property
    def selections(self) -> tuple[str, ...]:
        return (self.select,)


class TwoSelections:
    """An analysis of two selections, ``select1`` and ``select2`` (what the layout advice names)."""

    select1: str
    select2: str

    @property
    def selections(self) -> tuple[str, ...]:
        return (self.select1, self.select2)


def analysis_from_config(config: dict) -> Analysis:
    """Rebuild an analysis from its config dict."""
    from . import _analysis_class

    cfg = dict(config)
    name = cfg.pop("name")
    try:
        cls = _analysis_class(name)   # imports that analysis's module only
    except KeyError:
        from . import ANALYSES

        raise ConfigError(f"unknown analysis {name!r}; known: {', '.join(ANALYSES)}") from None
    return cls(**cfg)


def check_boxes(box: np.ndarray, frames: np.ndarray, source: str, analysis: str) -> None:
    """Raise MissingBoxError naming the first of ``frames`` whose box (a row of ``box``, (F, 6)) is
    missing (all six dimensions zero) or has zero volume (an edge of zero, angles that close no cell)."""
    dims = np.asarray(box).reshape(-1, 6)
    if (dims[:, :3] > 0).all() and (dims[:, 3:] == 90).all() and np.isfinite(dims).all():
        return   # rectangular, its edges finite and positive: a volume, with no box vectors made for each frame
    from ..kernels.geometry import box_volume  # (the compiled kernels load here, not on import)

    valid = box_volume(box) > 0
    if valid.all():
        return
    i = int(np.argmin(valid))
    problem = f"has a box of zero volume ({', '.join(f'{v:g}' for v in box[i])})" if np.any(box[i]) else \
        "has no periodic box"
    raise MissingBoxError(int(frames[i]), source,
                          f"{problem}, and the {analysis} analysis needs one (minimum image, the box volume); "
                          "a trajectory without periodic boundaries takes pbc=False (--no-pbc) where the "
                          "analysis offers it")


def positive_weights(weights: np.ndarray, what: str, where: str) -> np.ndarray:
    """``weights`` (float64) if they are finite, not negative and sum to more than zero; else a
    ConfigError naming them: a weighted centre or mean of zero total weight is not a number."""
    w = np.asarray(weights, dtype=np.float64)
    if not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
        bad = ("are not all finite" if not np.isfinite(w).all() else "include negative values" if (w < 0).any()
               else "sum to zero")
        raise ConfigError(f"{where}: the {what} of its {len(w)} atoms {bad}, so the weighted result has no value")
    return w


def no_frames(source: str, analysis: str) -> TrajscaleError:
    """The error of an accumulating analysis that got no frame to accumulate (a followed run stopped
    before its first block): a mean over nothing is not a number."""
    return FrameRangeError(f"{source}: no frame was analysed, and the {analysis} analysis needs at least one")


def check_finite_reference(positions, frame: int, trajectory) -> None:
    """Raise BadCoordinatesError when a reference Universe's positions (arrays) at ``frame`` hold NaN/inf."""
    if not all(np.isfinite(p).all() for p in positions):
        raise BadCoordinatesError(frame, getattr(trajectory, "filename", None) or "the reference",
                                  "NaN/inf reference coordinates")


def masses_of(group, why: str, alternative: str = "") -> np.ndarray:
    """``group``'s masses (float64), or one error naming the topology (a trajectory-only file has none)
    and ``why`` ("the radius of gyration needs")."""
    try:
        return np.asarray(group.masses, dtype=np.float64)
    except AttributeError:   # (MDAnalysis's NoDataError is one: catching it needs no import of all MDAnalysis)
        from ..errors import InputFileError

        top = getattr(group.universe, "filename", None) or "the topology"
        raise InputFileError(top, f"has no atom masses, which {why}: give a topology with masses "
                                  f"(TPR, PSF, PRMTOP, ...){alternative}") from None


def has_masses(group) -> bool:
    """Whether ``group``'s topology holds masses; asked of the group, since a cached topology knows only
    the masses of the selections it recorded."""
    return hasattr(group, "masses")
