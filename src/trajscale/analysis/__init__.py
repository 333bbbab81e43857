"""Split-apply-combine analyses."""

from __future__ import annotations

from .base import Analysis, Prepared, analysis_from_config
from .rmsd import RMSD, RMSDResult

ANALYSES: dict[str, type[Analysis]] = {"rmsd": RMSD}

__all__ = ["ANALYSES", "RMSD", "Analysis", "Prepared", "RMSDResult", "analysis_from_config"]
