"""The Analysis protocol: prepare once, map per block (pure), reduce (associative)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..block import Block


@dataclass(frozen=True)
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


class Analysis(ABC):
    """Split-apply-combine analysis.

    Subclasses set ``name`` and implement :meth:`prepare`, :meth:`map`,
    :meth:`reduce`, :meth:`result` and :meth:`get_config`.  An analysis object
    holds only its parameters; it travels as ``get_config()`` and is rebuilt
    on workers with :func:`analysis_from_config`.
    """

    name: str = ""
    #: Per-atom fields the analysis needs from each Block.
    fields: tuple[str, ...] = ("position",)
    #: True when partials hold one row per frame (concatenated in frame order).
    per_frame: bool = True
    #: The extensions its result's ``save`` writes (the extension decides the format).
    formats: tuple[str, ...] = ()

    @abstractmethod
    def prepare(self, universe, source) -> Prepared:
        """Resolve selections and references (once, on one process)."""

    @abstractmethod
    def map(self, block: Block, prep: Prepared) -> dict:
        """Partial result for one block; no side effects.

        The block's per-atom arrays may be overwritten by the next read once
        ``map`` returns: a partial must hold computed arrays, not views of them.
        """

    def reduce(self, partials: list[dict]) -> dict:
        """Combine partials; the default concatenates per-frame arrays in frame order."""
        partials = sorted((p for p in partials if p), key=lambda p: int(p["frame"][0]) if len(p["frame"]) else -1)
        if not partials:
            return {}
        if len(partials) == 1:   # a serial run's one task: no copy (distances: 2,000 x 60 x 101 doubles)
            return dict(partials[0])
        return {k: np.concatenate([p[k] for p in partials]) for k in partials[0]}

    @abstractmethod
    def result(self, reduced: dict, prep: Prepared):
        """Turn the reduced partial into the user-facing result."""

    @abstractmethod
    def get_config(self) -> dict:
        """Parameters as plain values, including ``"name"``."""


def analysis_from_config(config: dict) -> Analysis:
    """Rebuild an analysis from its config dict."""
    from ..errors import ConfigError
    from . import _analysis_class

    cfg = dict(config)
    name = cfg.pop("name")
    try:
        cls = _analysis_class(name)   # imports that analysis's module only
    except KeyError:
        from . import ANALYSES

        raise ConfigError(f"unknown analysis {name!r}; known: {', '.join(ANALYSES)}") from None
    return cls(**cfg)


def finite_frames(positions: np.ndarray) -> np.ndarray:
    """(F,) bool: which frames of (F, N, 3) coordinates are all finite.

    A NaN or inf anywhere makes a frame's sum non-finite, so one summing pass
    (no (F, N, 3) mask) clears the common case; only if some sum is not finite
    (a NaN, or finite values so large that the sum overflows) is every value checked.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        quick = np.isfinite(positions.sum(axis=(1, 2)))
    return quick if quick.all() else np.isfinite(positions).all(axis=(1, 2))


def check_finite(block: Block, positions: np.ndarray, source: str) -> None:
    """Raise BadCoordinatesError naming the first frame with NaN/inf coordinates."""
    from ..errors import BadCoordinatesError

    finite = finite_frames(positions)
    if not finite.all():
        raise BadCoordinatesError(block.start + int(np.argmin(finite)), source)


def masses_of(group, why: str, alternative: str = "") -> np.ndarray:
    """``group``'s masses (float64), or one clear error naming the topology when it has none.

    A trajectory-only file given as the topology (``--trajectory-as-topology``)
    has no masses; ``why`` says what needs them ("the radius of gyration needs").
    """
    from MDAnalysis.exceptions import NoDataError

    try:
        return np.asarray(group.masses, dtype=np.float64)
    except (NoDataError, AttributeError):
        from ..errors import InputFileError

        top = getattr(group.universe, "filename", None) or "the topology"
        raise InputFileError(top, f"has no atom masses, which {why}: give a topology with masses "
                                  f"(TPR, PSF, PRMTOP, ...){alternative}") from None


def has_masses(group) -> bool:
    """Whether ``group``'s topology holds masses (a trajectory-only topology has none).

    Asked of the group itself, not its Universe's atoms: a cached topology
    (``topology.CachedUniverse``) knows the masses of the selections it recorded.
    MDAnalysis's NoDataError for a missing attribute is an AttributeError.
    """
    return hasattr(group, "masses")
