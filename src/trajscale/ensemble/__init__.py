"""Ensembles: many trajectories, each with its own topology, analysed the same way in one job.

:mod:`.catalog` says what an ensemble is; the other modules run one.  Each name is imported on first use.
"""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .catalog import Ensemble, Member

__all__ = ["Ensemble", "Member"]

__getattr__, __dir__ = attach(__name__, {
    "Ensemble": ".catalog", "Member": ".catalog",
}, submodules=("catalog",))
