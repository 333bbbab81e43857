"""Sources hand out Blocks of frames; pick one by the file's magic bytes."""

from __future__ import annotations

from pathlib import Path

from .._lazy import attach
from ..errors import ConfigError
from ..util import check_input_file, is_hdf5

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .base import Source

    #: Kind -> Source class (``"h5md"``, ``"mda"``, ``"segments"``, ``"part"``), as a Source's
    #: ``get_config()`` names it. Built when first read (it imports every source module).
    SOURCES: dict[str, type[Source]]

#: kind -> (module, class) of every Source; a worker imports only the one its config names.
_KINDS = {"h5md": (".h5md", "H5MDSource"), "mda": (".mda", "MDASource"), "segments": (".segments", "SegmentedSource"),
          "part": (".parts", "PartSource"), "growing_h5md": (".follow", "GrowingH5MDSource")}


def _source_class(kind: str) -> type[Source]:
    import importlib

    module, cls = _KINDS[kind]
    return getattr(importlib.import_module(module, __name__), cls)


def _registry() -> dict[str, type[Source]]:
    """``SOURCES``: kind -> Source class (imports every source module)."""
    return {kind: _source_class(kind) for kind in _KINDS}


__getattr__, __dir__ = attach(__name__, {
    "SOURCES": _registry, "Source": ".base", "H5MDSource": ".h5md", "MDASource": ".mda",
    "PartSource": ".parts", "XDR_FORMATS": ".parts", "part_format": ".parts", "SegmentedSource": ".segments",
    "index_path": ".segments",
}, submodules=("base", "h5md", "mda", "parts", "segments"))


def reader_modules(trajectories) -> tuple[str, ...]:
    """The modules a worker will import to read ``trajectories`` beyond trajscale's own, told by name
    only (no file is opened): trajscale's XTC/TRR reader, MDAnalysis for other formats it reads,
    nothing for H5MD files and segment indexes."""
    paths = [str(trajectories)] if isinstance(trajectories, (str, Path)) else [str(t) for t in trajectories]
    suffixes = {Path(p).suffix.lower() for p in paths}
    if suffixes <= {".h5md", ".h5", ".hdf5", ".json", ""}:
        return ()
    if suffixes <= {".xtc", ".trr"}:
        return ("trajscale.sources._xdr",)
    return ("MDAnalysis",)


def open_source(trajectories, topology: str | None = None, *, driver: str | None = None,
                comm=None, collective: bool = False, group: str | None = None,
                assume_units: str | None = None, continuous: bool = False, strict: bool | None = None) -> Source:
    """Open the best Source for ``trajectories``.

    A single HDF5 file goes through the fast :class:`H5MDSource`; a single
    XTC/TRR through :class:`PartSource` and several XTC, TRR, DCD, ... parts
    through :meth:`SegmentedSource.from_parts` (frame offsets scanned once here,
    shipped to workers, each opening only its parts; joined as ``chain.plan_join``
    decides, ``continuous`` letting overlapping parts join); anything else through
    :class:`MDASource`. Formats other than H5MD need ``topology``.
    ``group`` (the H5MD particle group) and ``assume_units`` (``"nm"`` or
    ``"Angstrom"`` for datasets without a unit attribute) apply to H5MD files.
    ``strict``: an XTC/TRR part whose last frame is cut short is refused (True) or read
    without that frame, with a warning (False; None: the process's setting,
    :func:`.parts.refuse_partial_frames`).
    """
    from .mda import MDASource
    from .segments import SegmentedSource, index_path

    paths = [str(trajectories)] if isinstance(trajectories, (str, Path)) else [str(t) for t in trajectories]
    if len(paths) == 1 and index_path(paths[0]) is not None:   # a segment index, or the folder split wrote
        return SegmentedSource(paths[0], topology, group=group, assume_units=assume_units)
    for p in paths:
        check_input_file(p)
    if len(paths) == 1 and is_hdf5(paths[0]):
        from .h5md import H5MDSource

        return H5MDSource(paths[0], group=group, driver=driver, comm=comm, collective=collective,
                          assume_units=assume_units)
    if group is not None or assume_units is not None:
        raise ConfigError(f"{paths[0]}: --group and --assume-units apply to H5MD files; this one is read "
                          "through MDAnalysis, which knows its format's units")
    from .parts import XDR_FORMATS, PartSource, part_format

    # XTC/TRR parts are read by trajscale's own offsets; other formats through MDAnalysis, with a topology
    xdr_only = all(part_format(p) in XDR_FORMATS for p in paths)
    if topology is None and not xdr_only:
        raise ConfigError(f"{paths[0]}: reading this format needs a topology file")
    if not any(is_hdf5(p) for p in paths):
        if len(paths) > 1:
            return SegmentedSource.from_parts(paths, topology, continuous=continuous, strict=strict)
        if part_format(paths[0]) in XDR_FORMATS:
            return PartSource(paths[0], strict=strict)
    return MDASource(topology, paths)


def source_from_config(config: dict, comm=None) -> Source:
    """Reopen a Source from its ``get_config()`` dict (on a worker or rank)."""
    cfg = dict(config)
    kind = cfg.pop("kind")
    if kind not in _KINDS:
        raise ConfigError(f"unknown source kind {kind!r}; known: {', '.join(_KINDS)}")
    cls = _source_class(kind)
    if kind == "h5md":
        return cls(comm=comm, **cfg)
    return cls(**cfg)


__all__ = ["SOURCES", "H5MDSource", "MDASource", "PartSource", "SegmentedSource", "Source", "is_hdf5", "open_source",
           "source_from_config"]
