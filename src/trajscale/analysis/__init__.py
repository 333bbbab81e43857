"""Split-apply-combine analyses.

Each class is imported on first use (:mod:`trajscale._lazy`); ``ANALYSES``,
the registry workers rebuild analyses from, imports them all when first read.
"""

from __future__ import annotations

from .._lazy import attach
from ..registered import ANALYSES as _REGISTERED

TYPE_CHECKING = False
if TYPE_CHECKING:
    #: Name -> class of every built-in analysis (``"rmsd"``: :class:`~trajscale.RMSD`, ...), the registry workers
    #: rebuild analyses from; tests and plug-ins add their own to it. Built when first read.
    ANALYSES: dict[str, type]

#: The analysis registry: name -> (class, module) of the built-in analyses, in order.  An analysis is its own
#: module and one line here; the exports, ``ANALYSES``, the ``trajscale run`` commands, the run plans' tables
#: and the docs' table of defaults derive from it.
BUILTIN = {"rmsd": ("RMSD", ".rmsd"), "rmsf": ("RMSF", ".rmsf"), "rgyr": ("RadiusOfGyration", ".rgyr"),
            "average": ("AverageStructure", ".average"), "rdf": ("RDF", ".rdf"), "contacts": ("Contacts", ".contacts"),
            "distances": ("Distances", ".distances"), "com_distance": ("CentreOfMassDistance", ".comdist"),
            "ramachandran": ("Ramachandran", ".dihedrals"), "residue_contacts": ("ResidueContacts", ".contacts"),
            "per_frame": ("PerFrame", ".user"), "user_reduce": ("Reduce", ".user")}
#: Analyses the engine makes, rebuilt on workers by name but no command of their own (those of packages above
#: this one are registered by the package's root: :data:`trajscale._REGISTERED`).
_INTERNAL = {"group": "AnalysisGroup"}
_CLASSES = dict(BUILTIN.values())
_OTHERS = {"AnalysisGroup": ".group", "AverageResult": ".average",
           "Analysis": ".base", "FrameRows": ".base", "Prepared": ".base",
           "analysis_from_config": ".base", "ContactsResult": ".contacts", "RDFResult": ".rdf",
           "TimeSeries": ".results", "Features": ".results", "FeatureLabels": ".results", "RMSDResult": ".rmsd",
           "RMSFResult": ".rmsf", "ReduceResult": ".user",
           "per_frame": ".user"}

__all__ = sorted(["ANALYSES", "BUILTIN", *_CLASSES, *_OTHERS])


#: The entry-point group other packages register their analyses under (``name = "module:Class"``): they
#: join ``ANALYSES``, and so the command line and the workers that rebuild them by name.
ENTRY_POINT_GROUP = "trajscale.analyses"


def _registry() -> dict:
    """``ANALYSES``: name -> class of every built-in analysis, then those other packages register under
    :data:`ENTRY_POINT_GROUP`; tests add their own to it."""
    registry = {name: __getattr__(cls) for name, (cls, _) in BUILTIN.items()}
    for name, cls in _plugins().items():
        registry.setdefault(name, cls)
    return registry


def registered(plugins: bool = False) -> dict:
    """name -> class of the analyses known now: ``ANALYSES`` once it has been read, else the built-in ones
    (entry points are scanned only with ``plugins``: ``importlib.metadata`` costs a start a sixth of a second)."""
    registry = globals().get("ANALYSES")
    if registry is not None:
        return dict(registry)
    if plugins:
        return dict(__getattr__("ANALYSES"))
    return {name: __getattr__(cls) for name, (cls, _) in BUILTIN.items()}


def _plugins() -> dict:
    """name -> class of the analyses other packages register (a name trajscale has stays trajscale's; one
    that cannot be loaded is left out, with a warning)."""
    import logging
    from importlib.metadata import entry_points

    log = logging.getLogger(__name__)
    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN or ep.name in _INTERNAL or ep.name in _REGISTERED:
            log.warning("entry point %s = %s: trajscale's own analysis %r is kept", ep.name, ep.value, ep.name)
            continue
        try:
            found.setdefault(ep.name, ep.load())
        except Exception as exc:   # noqa: BLE001 - a broken plug-in must not stop trajscale's own analyses
            log.warning("entry point %s = %s left out: %s: %s", ep.name, ep.value, type(exc).__name__, exc)
    return found


def analysis_class(name: str) -> type:
    """The analysis class registered as ``name``, importing only its module (KeyError if unknown)."""
    if name in _INTERNAL:
        return __getattr__(_INTERNAL[name])
    if name in _REGISTERED:
        import importlib

        module, _, cls = _REGISTERED[name].partition(":")
        return getattr(importlib.import_module(module), cls)
    registry = globals().get("ANALYSES")
    if registry is not None:
        return registry[name]
    if name in BUILTIN:
        return __getattr__(BUILTIN[name][0])
    return __getattr__("ANALYSES")[name]   # another package's: the registry with its entry points


_analysis_class = analysis_class   # (the name the package's own modules import)


__getattr__, __dir__ = attach(__name__, {**_CLASSES, **_OTHERS, "ANALYSES": _registry},
                              submodules=tuple(sorted({"base", "fitting", "options", "results",
                                                       *(m[1:] for m in (*_CLASSES.values(), *_OTHERS.values()))})))
