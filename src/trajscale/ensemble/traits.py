"""The ensemble's Source's traits (:class:`~trajscale.formats.FormatTraits`): a kind of Source made by a run over
many trajectories, never matched to a file."""

from __future__ import annotations

from ..formats import FormatTraits

#: A round's config lists its members: a worker keeps the latest round's only.
ENSEMBLE = FormatTraits(kind="ensemble", source="trajscale.ensemble.source:EnsembleSource",
                        description="an ensemble's trajectories, one after another (made by trajscale.ensemble)",
                        replaced_each_round=True)

__all__ = ["ENSEMBLE"]
