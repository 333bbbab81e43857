"""Parallel H5MD writing (seed 004): domain-decomposed and frame-parallel producers, crash-consistent.

Names are imported on first use (:mod:`trajscale._lazy`)."""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    #: The write strategies :class:`~trajscale.ParallelWriter` accepts: ``"gather"``, ``"independent"``,
    #: ``"collective"``.
    STRATEGIES: tuple[str, ...]

__all__ = ["STRATEGIES", "ParallelWriter", "RepairResult", "repair"]

__getattr__, __dir__ = attach(__name__, {
    "RepairResult": ".repair", "repair": ".repair", "STRATEGIES": ".writer", "ParallelWriter": ".writer",
}, submodules=("exchange", "writer"))
