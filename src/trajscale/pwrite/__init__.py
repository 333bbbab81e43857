"""Parallel H5MD writing: domain-decomposed and frame-parallel producers, crash-consistent.

Names are imported on first use (:mod:`trajscale._lazy`)."""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    #: The write strategies :class:`~trajscale.ParallelWriter` accepts: ``"gather"``, ``"independent"``,
    #: ``"collective"``.
    STRATEGIES: tuple[str, ...]

__all__ = ["STRATEGIES", "ParallelWriter", "RepairResult", "WriterSettings", "repair"]

__getattr__, __dir__ = attach(__name__, {
    "RepairResult": ".repair", "repair": ".repair", "STRATEGIES": ".settings", "ParallelWriter": ".writer",
    "WriterSettings": ".settings",
}, submodules=("exchange", "settings", "writer"))
