"""Which Source reads a file: one table of formats, each told by the file's own bytes.

Every caller that opens a trajectory asks this module, so a format is read by the same Source everywhere. Each
Source declares its traits in one record (:class:`~trajscale.formats.FormatTraits`); the registry reads those
records and never probes a Source (xarray's ``guess_engine`` is the model). A file is matched by its bytes (only
Sources whose files may begin so are imported), then by name ending (so a damaged ``.xtc`` gets the XTC reader's
error), then by MDAnalysis's extension table; else refused in one line listing what is supported. Third parties
add a Source through the entry point group ``trajscale.sources`` (``kind = module:Class``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError, InputFileError
from ..formats import FALLBACK, FormatTraits, own_kinds, own_traits, traits_of
from ..storage.bytestore import ByteStore, NoFile
from ..storage.location import Location
from ..util import check_input_file
from .base import OpenRequest, Source

log = logging.getLogger(__name__)

#: The entry point group through which other packages add Sources (name: kind, value: ``module:Class``).
ENTRY_POINT_GROUP = "trajscale.sources"

#: Bytes of a file's head the registry reads to compare with the traits' ``begins``.
HEAD_BYTES = 8

#: A request with no options: a file opened as its format's Source opens it by default.
_NOTHING_ASKED = OpenRequest()


class Match(NamedTuple):
    """The Source that reads a file and its format's name (a named tuple: a seventh of a dataclass's start cost)."""

    source: type[Source]
    format: str

    @property
    def kind(self) -> str:
        return self.source.kind


def fetched_modules(path: str) -> tuple[str, ...]:
    """What a worker imports to read ``path``'s format from a URL (every format's where the name tells none)."""
    suffix = Path(path).suffix.lower()
    chosen = [t for t in own_traits() if suffix in t.suffixes or t.holds_members(path)] or own_traits()
    return tuple(dict.fromkeys(m for t in chosen for m in t.fetched_modules))


@functools.cache
def _load(kind: str, target: str) -> type[Source]:
    module, _, name = target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Source)) or cls.kind != kind:
        raise ConfigError(f"source {target!r} registered as {kind!r} is not a Source of that kind")
    return cls


@functools.cache
def plugin_targets() -> dict[str, str]:
    """kind -> ``module:Class`` of the Sources other packages register (a kind trajscale has stays trajscale's)."""
    from importlib.metadata import entry_points

    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if traits_of(ep.name) is not None:
            log.warning("entry point %s = %s: trajscale's own source kind %r is kept", ep.name, ep.value, ep.name)
            continue
        found.setdefault(ep.name, ep.value)
    return found


def source_class(kind: str) -> type[Source]:
    """The Source class of ``kind`` (a config's ``"kind"``): trajscale's own, then the plugins'."""
    own = traits_of(kind)
    target = own.source if own is not None else plugin_targets().get(kind)
    if target is None:
        known = [*own_kinds(), *plugin_targets()]
        raise ConfigError(f"unknown source kind {kind!r}; known: {', '.join(known)}")
    return _load(kind, target)


def _in_match_order(may: Callable[[FormatTraits], bool] | None = None) -> Iterator[type[Source]]:
    """Every Source that opens files, in match order (own, plugins, MDAnalysis's), each imported when reached."""
    *own, last = own_traits()
    for traits in own:
        if may is None or may(traits):
            yield source_class(traits.kind)
    for kind in plugin_targets():
        yield source_class(kind)
    if may is None or may(last):
        yield source_class(last.kind)


def format_sources() -> list[type[Source]]:
    """Every Source that opens files, in the order files are matched (trajscale's own, then plugins')."""
    return list(_in_match_order())


def all_sources() -> dict[str, type[Source]]:
    """kind -> Source class of every Source (imports every source module and plugin)."""
    kinds = [*own_kinds(), *plugin_targets()]
    return {kind: source_class(kind) for kind in kinds}


def supported() -> str:
    """The formats trajscale reads, in one line (for errors)."""
    names = [", ".join(cls.formats) for cls in format_sources() if cls.formats]
    return "; ".join(names) + "; and the other formats MDAnalysis reads, by their extension"


def _by_bytes(path: str, head: bytes, store: ByteStore | None = None) -> Match | None:
    """The Source whose declared first bytes begin ``head`` and whose ``guess_format`` takes the file."""
    suffix = Path(path).suffix.lower()

    def may(traits: FormatTraits) -> bool:
        return traits.may_begin(head, suffix)

    # a path whose bytes cannot be read here (``file.h5#348/0``; a missing file) is asked of every Source
    for cls in _in_match_order(may if head else None):
        fmt = cls.guess_format(path, store) if traits_of(cls.kind) is not None else cls.guess_format(path)
        if fmt is not None:
            return Match(cls, fmt)
    return None


def recognised(location: Location) -> Match | None:
    """The Source whose format ``location``'s first bytes are in, or None (nothing else asked; never an error)."""
    store = store_of(location)
    try:
        return _by_bytes(location.where, _head(store), store)
    except (InputFileError, OSError):
        return None
    finally:
        if store is not None:
            store.close()


def by_name(path: str) -> Match | None:
    """The Source whose :attr:`~.base.Source.suffixes` hold the file's name ending (no file is read)."""
    suffix = Path(path).suffix.lower()
    for cls in _in_match_order(lambda t: suffix in t.suffixes):
        if suffix in cls.suffixes:
            return Match(cls, cls.suffixes[suffix])
    return None


def _by_mdanalysis(path: str) -> Match | None:
    """MDAnalysis's format for the extension, read by the Source that names it, else by its one-file reader."""
    last = fallback_source()
    fmt = last.mdanalysis_format(path)
    if fmt is None:
        return None
    owner = next((cls for cls in _in_match_order(lambda t: fmt in t.formats) if fmt in cls.formats), last)
    return Match(owner, fmt)


def guess(location: Location) -> Match:
    """The Source that reads ``location`` and the name of its format.

    Raises
    ------
    InputFileError
        The file is missing, or no Source reads it (one line listing what is supported).
    """
    store = store_of(location)
    try:
        return _match(location.where, store)
    finally:
        if store is not None:
            store.close()


def _match(path: str, store: ByteStore | None) -> Match:
    """:func:`guess` of ``path`` whose bytes ``store`` holds (None: none of its own); the store stays open."""
    if store is not None and store.costs_request:   # fetched bytes: told by their first bytes and name
        return _guess_fetched(path, store)
    match = _by_bytes(path, _head(store), store)
    if match is None:
        check_input_file(path)   # missing, a folder without a segment index, or empty: said as such
        match = by_name(path) or _by_mdanalysis(path)
    if match is None:
        raise InputFileError(path, f"not a trajectory format trajscale reads (it reads {supported()})")
    log.debug("%s: read as %s by %s", path, match.format, match.source.__name__)
    return match


def store_of(location: Location) -> ByteStore | None:
    """The store of ``location``'s bytes (shared with its Source); None for a local path with no bytes of its own."""
    try:
        return location.store()
    except (NoFile, OSError):
        return None


def _head(store: ByteStore | None) -> bytes:
    """A local file's first bytes (none where it has no bytes of its own or cannot be read: every Source asked)."""
    if store is None:
        return b""
    try:
        return store.first_bytes(HEAD_BYTES)
    except OSError:
        return b""


def _guess_fetched(url: str, store: ByteStore) -> Match:
    """The Source that reads the object at ``url``, told from its first bytes and its name."""
    head = store.first_bytes(HEAD_BYTES)
    if not head:
        raise InputFileError(url, "the object is empty")
    match = _by_bytes(url, head, store) or by_name(url)
    if match is None:
        raise InputFileError(url, f"not a trajectory format trajscale reads (it reads {supported()})")
    if not match.source.reads_urls:
        readers = ", ".join("segment indexes" if f == "SEGMENTS" else f
                            for cls in format_sources() if cls.reads_urls for f in cls.formats)
        raise InputFileError(url, f"{match.format} files are read from a local disk only (from a URL: {readers}); "
                                  "download it first")
    log.debug("%s: read as %s by %s", url, match.format, match.source.__name__)
    return match


def for_format(name: str) -> type[Source]:
    """The Source that reads the format called ``name`` (a segment index records it)."""
    name = name.upper()
    for cls in _in_match_order(lambda t: name in t.formats):
        if name in cls.formats:
            return cls
    return fallback_source()   # a format only MDAnalysis knows: its reader says if it does not


def fallback_source() -> type[Source]:
    """The Source of a file no other Source claims: MDAnalysis's one-file reader, by the file's extension."""
    return source_class(FALLBACK)


def decode_s_per_atom(name: str) -> float:
    """Seconds per atom one frame of format ``name`` costs to decode beyond reading its bytes (0: plain floats)."""
    name = name.upper()
    return float(for_format(name).decode_s_per_atom.get(name, 0.0))


def decoding_of(name: str) -> str | None:
    """Who decodes a frame of format ``name`` beyond the selected atoms, and how far (None: read in place)."""
    return for_format(name).decoding_of(name.upper())


def open_file(location: Location, request: OpenRequest = _NOTHING_ASKED) -> Source:
    """Open one file with the Source the registry picks; the store that tells the format is the one it reads."""
    return _open(location, request, True)


def open_part(location: Location, request: OpenRequest = _NOTHING_ASKED) -> Source:
    """Open one file of several: H5MD's options in ``request`` go only to Sources that take them."""
    return _open(location, request, False)


def _open(location: Location, request: OpenRequest, checked: bool) -> Source:
    """:func:`open_file` (``checked``: H5MD's options refused where they do not apply) or :func:`open_part`."""
    match, store = _told(location, request, checked)
    if store is not request.store:
        request = dataclasses.replace(request, store=store)
    return match.source.open(location, request)


def _told(location: Location, request: OpenRequest, checked: bool) -> tuple[Match, ByteStore | None]:
    """The Source and format at ``location``, and the store they were told from (closed unless it reads through)."""
    store, path = request.store, location.where
    try:
        if request.format:
            match = Match(for_format(request.format), request.format.upper())
        else:
            if store is None:
                store = store_of(location)
            match = _match(path, store)
        refused = _refused_options(match.source, request) if checked else None
        if refused:
            raise ConfigError(f"{path}: {refused}")
    except BaseException:
        if store is not None:
            store.close()
        raise
    if store is not None and not match.source.reads_given_store:   # (it opens the file its own way)
        store.close()
        store = None
    return match, store


def check_options(path: str, cls: type[Source], request: OpenRequest) -> None:
    """H5MD's options (``group``, ``assume_units``) asked of a Source that does not take them: one line."""
    refused = _refused_options(cls, request)
    if refused:
        raise ConfigError(f"{path}: {refused}")


def _refused_options(cls: type[Source], request: OpenRequest) -> str | None:
    """Why ``request`` cannot be asked of ``cls`` (H5MD's options of a Source that does not take them), or None."""
    if (request.group is not None or request.assume_units is not None) and not cls.takes_h5md_options:
        return (f"--group and --assume-units apply to H5MD files; this one is read by {cls.__name__}, which "
                "knows its format's units")
    return None


def part_record(location: Location, request: OpenRequest = _NOTHING_ASKED) -> dict:
    """``{"path", "format", "n_frames", "n_atoms", "offsets", "damaged"}`` of one file as a part of a chain."""
    path = location.where
    match, store = _told(location, request, False)
    try:
        if not match.source.supports_parts:
            raise InputFileError(path, f"{match.format} files cannot be parts of a chain; the formats that can: "
                                       + ", ".join(f for cls in format_sources() if cls.supports_parts
                                                   for f in cls.formats))
        check_options(path, match.source, request)
    except BaseException:
        if store is not None:
            store.close()
        raise
    with match.source.open(location, OpenRequest(format=match.format, strict=request.strict, group=request.group,
                                                 assume_units=request.assume_units, store=store)) as src:
        offsets = src.get_config().get("offsets") if match.source.ships_offsets else None
        return {"path": path, "format": src.format, "n_frames": src.n_frames, "n_atoms": src.n_atoms,
                "offsets": offsets, "damaged": src.damaged}


def capabilities() -> list[dict]:
    """One row per Source that opens files: its kind, class, formats and capabilities (the docs' table)."""
    return [{"kind": cls.kind, "source": cls.__name__, "formats": list(cls.formats),
             "description": cls.description, "parts": cls.supports_parts, "following": cls.supports_following,
             "slab_reads": cls.supports_slab_reads, "mpio": cls.supports_mpio}
            for cls in format_sources()]


def formats_table() -> str:
    """The formats table of the documentation (Markdown), made from :func:`capabilities`."""
    def mark(on: bool) -> str:
        return "yes" if on else "-"

    lines = ["| formats | Source (kind) | reads | parts | following | slab reads | MPI-IO |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {', '.join(row['formats'])} | `{row['source']}` (`{row['kind']}`) | {row['description']} | "
              f"{mark(row['parts'])} | {mark(row['following'])} | {mark(row['slab_reads'])} | {mark(row['mpio'])} |"
              for row in capabilities()]
    return "\n".join(lines)


__all__ = ["ENTRY_POINT_GROUP", "Match", "all_sources", "by_name", "capabilities", "check_options",
           "decode_s_per_atom", "decoding_of", "fallback_source", "fetched_modules", "for_format", "format_sources",
           "formats_table", "guess", "open_file", "open_part", "part_record", "plugin_targets", "recognised",
           "source_class", "store_of", "supported"]
