"""Parallel H5MD writing (seed 004): domain-decomposed and frame-parallel producers, crash-consistent."""

from __future__ import annotations

from .repair import RepairResult, repair
from .writer import STRATEGIES, ParallelWriter

__all__ = ["STRATEGIES", "ParallelWriter", "RepairResult", "repair"]
