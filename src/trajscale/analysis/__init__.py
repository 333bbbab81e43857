"""Split-apply-combine analyses.

Each class is imported on first use (:mod:`trajscale._lazy`); ``ANALYSES``,
the registry workers rebuild analyses from, imports them all when first read.
"""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    #: Name -> class of every built-in analysis (``"rmsd"``: :class:`~trajscale.RMSD`, ...), the registry workers
    #: rebuild analyses from; tests and plug-ins add their own to it. Built when first read.
    ANALYSES: dict[str, type]

#: The analysis registry: name -> (class, module) of the built-in analyses, in order. An analysis is its own
#: module (its class declares its command: :mod:`.options`) and one line here; the exports here and in
#: ``trajscale``, the submodules, ``ANALYSES``, the ``trajscale run`` commands, the run plans' tables and
#: the docs' table of defaults derive from it.
BUILTIN = {"rmsd": ("RMSD", ".rmsd"), "rmsf": ("RMSF", ".rmsf"), "rgyr": ("RadiusOfGyration", ".rgyr"),
            "average": ("AverageStructure", ".average"), "rdf": ("RDF", ".rdf"), "contacts": ("Contacts", ".contacts"),
            "distances": ("Distances", ".distances"), "com_distance": ("CentreOfMassDistance", ".comdist"),
            "per_frame": ("PerFrame", ".user"), "user_reduce": ("Reduce", ".user")}
#: Analyses the engine makes, rebuilt on workers by name but no command of their own.
_INTERNAL = {"group": ("AnalysisGroup", ".group")}
_CLASSES = dict(BUILTIN.values())
_OTHERS = {"AnalysisGroup": ".group", "AverageResult": ".average",
           "Analysis": ".base", "FrameRows": ".base", "Prepared": ".base",
           "analysis_from_config": ".base", "ContactsResult": ".contacts", "RDFResult": ".rdf",
           "TimeSeries": ".results", "RMSDResult": ".rmsd", "RMSFResult": ".rmsf", "ReduceResult": ".user",
           "per_frame": ".user"}

__all__ = sorted(["ANALYSES", "BUILTIN", *_CLASSES, *_OTHERS])


def _registry() -> dict:
    """``ANALYSES``: name -> class of every built-in analysis; tests and plug-ins add their own to it."""
    return {name: __getattr__(cls) for name, (cls, _) in BUILTIN.items()}


def _analysis_class(name: str) -> type:
    """The analysis class registered as ``name``, importing only its module (KeyError if unknown).

    Once ``ANALYSES`` has been read it is the registry (it may hold analyses added at run time).
    """
    if name in _INTERNAL:
        return __getattr__(_INTERNAL[name][0])
    registry = globals().get("ANALYSES")
    if registry is not None:
        return registry[name]
    return __getattr__(BUILTIN[name][0])


__getattr__, __dir__ = attach(__name__, {**_CLASSES, **_OTHERS, "ANALYSES": _registry},
                              submodules=tuple(sorted({"base", "fitting", "options", "results",
                                                       *(m[1:] for m in (*_CLASSES.values(), *_OTHERS.values()))})))
