"""Sources hand out Blocks of frames; the format registry (:mod:`.registry`) picks one by the file's own bytes."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from .._lazy import attach
from ..storage.location import Location
from ..storage.location import absolute as locate
from ..util import is_hdf5

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .base import Source

    #: Kind -> Source class, as ``get_config()`` names it; built when first read (it imports every source).
    SOURCES: dict[str, type[Source]]


def _registry() -> dict[str, type[Source]]:
    """``SOURCES``: kind -> Source class (imports every source module)."""
    from .registry import all_sources

    return all_sources()


def _of_kind(kind: str):
    """The Source class of ``kind``, as the registry finds it (its module is its format's, above this package)."""
    def load() -> type[Source]:
        from .registry import source_class

        return source_class(kind)
    return load


__getattr__, __dir__ = attach(__name__, {
    "SOURCES": _registry, "Source": ".base", "OpenRequest": ".base", "H5MDSource": _of_kind("h5md"),
    "MDASource": _of_kind("mda"), "XDRSource": _of_kind("xdr"), "MDAPartSource": _of_kind("mda_part"),
    "SegmentedSource": ".segments", "index_path": ".segments",
}, submodules=("base", "registry", "segments"))


#: An IMD stream's address begins so (``imd://HOST:PORT``).
SCHEME = "imd://"
INDEX_NAME = "index.json"


def is_stream(trajectory) -> bool:
    """Whether ``trajectory`` is an IMD stream's address rather than a file (told without importing the receiver)."""
    return isinstance(trajectory, str) and trajectory.startswith(SCHEME)


def reader_modules(trajectories) -> tuple[str, ...]:
    """The modules a worker will import to read ``trajectories``, told by name only: the Sources' modules and
    :attr:`~.base.Source.worker_modules`, plus, for a URL, the store's and the format's fetched modules."""
    from .registry import by_name, fallback_source, fetched_modules

    paths = [str(trajectories)] if isinstance(trajectories, (str, os.PathLike)) else [str(t) for t in trajectories]
    found: list[str] = []
    for p in paths:
        match = by_name(p)
        cls = match.source if match is not None else None if Path(p).is_dir() else fallback_source()
        found += [m for m in ((cls.__module__, *cls.worker_modules) if cls is not None else ()) if m not in found]
        found += [m for m in Location(p).worker_modules(fetched_modules(p)) if m not in found]
    return tuple(found)


def with_parts(inputs) -> list:
    """``inputs`` and, after each readable segment index among them, the parts it names (no output may be one)."""
    out = []
    for p in inputs:
        out.append(p)
        if p is not None and (os.fspath(p).endswith(".json") or os.path.isdir(p)):
            index = os.path.join(p, INDEX_NAME) if os.path.isdir(p) else os.fspath(p)
            try:
                with open(index) as fh:
                    segments = json.load(fh).get("segments") or []
                root = os.path.dirname(os.path.abspath(index))
                out += [os.path.join(root, s["path"]) for s in segments if isinstance(s, dict) and "path" in s]
            except (OSError, ValueError, AttributeError, TypeError):
                pass
    return out


def open_source(trajectories, topology: str | None = None, *, continuous: bool = False,
                storage_options: Mapping | None = None, **request) -> Source:
    """Open the Source that reads ``trajectories``, as the format registry (:mod:`.registry`) decides.

    One file is opened by the Source its own bytes name (:class:`H5MDSource`, :class:`XDRSource`,
    :class:`MDAPartSource` for the other formats MDAnalysis reads, :class:`SegmentedSource` for a segment index
    or its folder, ...). Several files (paths or URLs, in order) become one trajectory through
    :meth:`SegmentedSource.from_parts` (joined as ``chain.plan_join`` decides; ``continuous`` lets overlapping
    parts join).

    ``storage_options`` are those of the URLs among them (docs/remote.md; over the process's own, the command
    line's ``--storage-option``), kept in the config; a :class:`~trajscale.storage.location.Location` given
    brings its own. ``request`` takes the fields of
    :class:`~.base.OpenRequest`: ``driver``, ``comm``, ``collective`` (H5MD through MPI-IO), ``group`` and
    ``assume_units`` (``"nm"`` or ``"Angstrom"`` for datasets without a unit attribute), ``strict`` (an XTC/TRR
    whose last frame is cut short is refused (True) or read without it, with a warning (False; None: the
    process's setting, :func:`trajscale.xdr.source.refuse_partial_frames`)). ``topology`` is kept by a segment
    index for its parts."""
    from .base import OpenRequest

    given = {k: v for k, v in request.items() if k in OPEN_FIELDS}
    if len(given) < len(request):
        from ..errors import ConfigError

        unknown = ", ".join(sorted(set(request) - set(given)))
        raise ConfigError(f"open_source: unknown option {unknown}; it takes continuous, storage_options, "
                          f"{', '.join(OPEN_FIELDS)}")
    where = Location.each(trajectories, storage_options)
    if len(where) == 1:   # (said as given: a part's location is made absolute by from_parts)
        from .registry import open_file, store_of

        # the file's bytes, opened once: the store that tells the format is the one the Source reads
        return open_file(where[0], OpenRequest(topology=None if topology is None else str(topology),
                                               store=store_of(where[0]), **given))
    from .segments import SegmentedSource

    return SegmentedSource.from_parts(where, topology, continuous=continuous, strict=given.get("strict"),
                                      group=given.get("group"), assume_units=given.get("assume_units"))


#: The fields of :class:`~.base.OpenRequest` that :func:`open_source` takes from its caller.
OPEN_FIELDS = ("driver", "comm", "collective", "group", "assume_units", "strict")


def config_location(config: dict) -> Location:
    """The location a Source's ``get_config()`` names, with the options its store was read with."""
    return Location(config["path"], config.get("storage_options"))


def source_from_config(config: dict, comm=None) -> Source:
    """Reopen a Source from its ``get_config()`` dict (on a worker or rank)."""
    from .registry import source_class

    cfg = dict(config)
    cls = source_class(cfg.pop("kind"))
    return cls(comm=comm, **cfg) if cls.supports_mpio else cls(**cfg)


__all__ = ["SOURCES", "H5MDSource", "MDAPartSource", "MDASource", "OpenRequest", "SegmentedSource",
           "Source", "XDRSource", "config_location", "is_hdf5", "locate", "open_source",
           "source_from_config", "with_parts"]
