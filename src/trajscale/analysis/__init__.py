"""Split-apply-combine analyses."""

from __future__ import annotations

from .average import AverageResult, AverageStructure
from .base import Analysis, Prepared, analysis_from_config
from .contacts import Contacts, ContactsResult
from .distances import Distances
from .rdf import RDF, RDFResult
from .results import TimeSeries
from .rgyr import RadiusOfGyration
from .rmsd import RMSD, RMSDResult
from .rmsf import RMSF, RMSFResult
from .user import PerFrame, Reduce, ReduceResult, per_frame

ANALYSES: dict[str, type[Analysis]] = {
    cls.name: cls for cls in (RMSD, RMSF, RadiusOfGyration, AverageStructure, RDF, Contacts, Distances,
                              PerFrame, Reduce)
}

__all__ = ["ANALYSES", "RDF", "RMSD", "RMSF", "Analysis", "AverageResult", "AverageStructure", "Contacts",
           "ContactsResult", "Distances", "PerFrame", "Prepared", "RDFResult", "RMSDResult", "RMSFResult",
           "RadiusOfGyration", "Reduce", "ReduceResult", "TimeSeries", "analysis_from_config", "per_frame"]
