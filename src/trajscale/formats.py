"""What a format is, declared once: :class:`FormatTraits`, the one record every format decision reads.

Each format declares one frozen record in a module that imports nothing heavy (the registry reads every record
before it opens a file, and an XTC's run must not import HDF5).  The registry, the ensemble's catalog, the pools'
preloads, the topology loader and xarray's ``guess_can_open`` read these records; nothing else names a format."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def _frozen(mapping: Mapping | None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class FormatTraits:
    """One format's traits, read by every caller that makes a format decision.

    Attributes
    ----------
    kind
        The Source's kind (``get_config()["kind"]``).
    source
        ``"module:Class"`` of the Source, imported when a file is first matched to it.
    formats
        The format names it reads (upper case, MDAnalysis's names where it has one).
    suffixes
        File name ending -> format, asked when no Source recognises a file's bytes.
    begins
        The bytes its files may begin with (None: any file, or a folder; its ``guess_format`` is asked).
    precedence
        Where it is asked among the formats whose first bytes a file has: lower first (a format that is a
        special case of another, mdCATH of HDF5, comes before it).
    not_named
        Name endings its files never have (a ``.h5md`` file is H5MD's, however its groups look).
    frames_only
        MDAnalysis's format name -> the name said in a message, for files of this Source that hold frames but
        no atom names, residues or masses (refused as a topology, without importing MDAnalysis).
    members
        ``"module:function"`` listing the member trajectories one file holds (``(location, base) ->
        list[Member]``); empty for a format whose file is one trajectory.
    member_patterns
        File name patterns (``fnmatch``) of files that hold several members, offered to :attr:`members`
        without a catalog's ``format`` column.
    fetched_modules
        Modules a worker imports to read this format's bytes from a URL (its caching file objects, its
        offsets index), started with the workers beside the store's own.
    partial_frames
        ``"module:function"`` of the context manager that sets, for the process, whether a cut-short last
        frame is refused (``--strict``) or left out; empty for a format that has no partial frames.
    self_describing
        Its files open as an array dataset without a topology (they store their atoms, or list their parts):
        xarray's ``guess_can_open`` claims them.
    read_cost
        ``"module:function"`` that costs a run's reads on a file's layout (``(facts, atoms, frames, stride)``),
        for the advice; empty for a format whose layout is not costed.
    """

    kind: str
    source: str
    formats: tuple[str, ...] = ()
    suffixes: Mapping[str, str] = field(default_factory=dict)
    begins: tuple[bytes, ...] | None = None
    precedence: int = 50
    not_named: tuple[str, ...] = ()
    frames_only: Mapping[str, str] = field(default_factory=dict)
    members: str = ""
    member_patterns: tuple[str, ...] = ()
    fetched_modules: tuple[str, ...] = ()
    partial_frames: str = ""
    self_describing: bool = False
    read_cost: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "suffixes", _frozen(self.suffixes))
        object.__setattr__(self, "frames_only", _frozen(self.frames_only))

    def may_begin(self, head: bytes, suffix: str) -> bool:
        """Whether a file beginning with ``head`` and named with ``suffix`` may be one of this format's."""
        return (self.begins is None or head.startswith(self.begins)) and suffix not in self.not_named

    def holds_members(self, location: str) -> bool:
        """Whether a file at ``location`` (a path or URL) is named as one holding several members."""
        base = location.rstrip("/").rsplit("/", 1)[-1]
        return bool(self.members) and any(fnmatch.fnmatch(base, p) for p in self.member_patterns)

    def partial_frames_policy(self, strict: bool):
        """The context manager setting this format's cut-short-frame policy; a no-op for a format without one."""
        if not self.partial_frames:
            return contextlib.nullcontext()
        return load(self.partial_frames)(strict)


def load(target: str):
    """The object ``"module:name"`` names (imported now)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


#: A segment index (JSON, an object first, after any white space) or the folder that holds one.
SEGMENTS = FormatTraits(
    kind="segments", source="trajscale.sources.segments:SegmentedSource", formats=("SEGMENTS",),
    suffixes={".json": "SEGMENTS"}, begins=(b"{", b" ", b"\t", b"\n", b"\r", b"\x0b", b"\x0c"), precedence=10,
    self_describing=True)

#: Where trajscale's own formats declare their traits (``"module:NAME"``, in modules that import nothing of
#: the format's reader): the one list of the formats trajscale reads. Files are matched in the records'
#: ``precedence`` order; the kind named :data:`FALLBACK` is asked last, after other packages' Sources.
FORMAT_TRAITS = (
    "trajscale.formats:SEGMENTS",
    "trajscale.mdcath.traits:MDCATH",
    "trajscale.h5md.traits:H5MD",
    "trajscale.xdr.traits:XDR",
    "trajscale.npy.traits:NPY",
    "trajscale.mdareaders.traits:MDA_PART",
)
#: The kind of the Source of a file no other Source claims: MDAnalysis's one-file reader (it goes by the
#: file's extension, through MDAnalysis's own table of formats).
FALLBACK = "mda_part"


@functools.cache
def own_traits() -> tuple[FormatTraits, ...]:
    """The traits of trajscale's own formats, in the order files are matched (:data:`FORMAT_TRAITS`)."""
    found = [load(target) for target in FORMAT_TRAITS]
    return tuple(sorted(found, key=lambda t: (t.kind == FALLBACK, t.precedence)))


@functools.cache
def _by_kind() -> dict[str, FormatTraits]:
    return {t.kind: t for t in own_traits()}


def traits_of(kind: str) -> FormatTraits | None:
    """The traits of the format whose Source has ``kind`` (None: a Source of no file format, or a plugin's)."""
    return _by_kind().get(kind)


def traits_for_format(name: str) -> FormatTraits | None:
    """The traits of the format called ``name`` (any case; None: one only MDAnalysis names, or a plugin's)."""
    name = str(name).upper()
    return next((t for t in own_traits() if name in t.formats), None)


def frames_only_format(mdanalysis_format: str) -> str | None:
    """The name said of a file of ``mdanalysis_format`` that holds frames but no atoms; None for one that does."""
    name = str(mdanalysis_format).upper()
    return next((t.frames_only[name] for t in own_traits() if name in t.frames_only), None)


def expanders() -> dict[str, FormatTraits]:
    """Format kind -> traits, of every format whose one file holds several member trajectories."""
    return {t.kind: t for t in own_traits() if t.members}


def partial_frames_policy(strict: bool) -> contextlib.ExitStack:
    """Every format's cut-short-frame policy (``--strict``) as one context manager; formats not imported left alone."""
    stack = contextlib.ExitStack()
    for t in own_traits():
        if t.partial_frames and (strict or t.partial_frames.partition(":")[0] in sys.modules):
            stack.enter_context(t.partial_frames_policy(strict))
    return stack


def read_cost(fmt: str):
    """The function that costs a run's reads on a ``fmt`` file's layout; None where it is not costed."""
    found = traits_for_format(fmt)
    return load(found.read_cost) if found is not None and found.read_cost else None


__all__ = ["FALLBACK", "FORMAT_TRAITS", "SEGMENTS", "FormatTraits", "expanders",
           "frames_only_format", "load", "own_traits", "partial_frames_policy", "read_cost", "traits_for_format",
           "traits_of"]
