"""Ensembles: many trajectories, each with its own topology, analysed the same way in one job.

:mod:`.catalog` says what an ensemble is (:class:`Ensemble`, :class:`Member`; catalogs, globs, the
hook for files that hold several trajectories); the other modules run one (tasks balanced across
trajectories on any executor, per-trajectory results, refusals and resumption).  Each name is
imported on first use.
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
