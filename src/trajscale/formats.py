"""What a format is, declared once: :class:`FormatTraits`, the one record every format decision reads.

Each kind of Source declares one frozen record in a module that imports nothing heavy (the registry reads every
format's record before it opens a file, and an XTC's run must not import HDF5); the Source class reads its
record and restates none of it.  The registry, the ensemble's catalog, the pools' preloads, the topology loader
and xarray's ``guess_can_open`` read these records; nothing else names a format.

Where the records are is registered downward (:mod:`trajscale.registered`): the package's root, which stands
above every layer, names them, so that this module, under every format, names none."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from . import registered


def _frozen(mapping: Mapping | None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True, eq=False)   # (one record a format, told by identity: no field-wise __eq__ to make)
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
        list[Member]``, the file's :class:`~trajscale.storage.location.Location` with the ensemble's options);
        empty for a format whose file is one trajectory.
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
    description
        One line for the formats table (docs, and the error for an unknown format).
    supports_mpio
        Its files open with HDF5's MPI-IO driver (collective opens and reads).
    supports_parts, supports_following, lists_parts, grows_by_appending
        A file may be one part of a chain or a segment index; ``trajscale run --follow`` reads it while it is
        written; it lists other files (a segment index: a follower checks each part read); it only grows while
        written (a follower that sees it shrink knows it was replaced).
    snapshots
        ``"module:function"`` of a follower's snapshot of a file being written, called as ``(path, format,
        topology, group, assume_units) -> Snapshot``.
    decode_s_per_atom, decoding
        Per format: seconds per atom to decode one frame (a format not named is plain floats, costed by its
        bytes); who decodes a frame's atoms beyond those selected (``prefix:WHO``, up to the last selected atom,
        or ``whole:WHO``; ``"*"``: every format's; a format not named reads the selected atoms' bytes only).
    supports_slab_reads, fills_rows
        A range of frames is read in one call, not frame by frame; ``read_into`` fills the caller's rows
        directly (no block of its own in between).
    ships_offsets
        The preparing process scans the frame offsets once and ships them (``OpenRequest.offsets``).
    replaced_each_round
        Each round of a run hands the workers a config of its own (an ensemble's): a process keeps the latest,
        letting go of (not closing) the ones before, whose files the next round shares.
    takes_h5md_options, stores_atom_labels
        ``group`` and ``assume_units`` (H5MD's options) apply; a file may store its atoms' labels beside its frames.
    reads_urls, reads_given_store
        It reads a file behind a URL by range requests; ``open`` reads through the registry's store (else the
        registry closes it).
    worker_modules
        Modules beyond the Source's own a worker imports to read this format (started with the workers).
    shares_file_store, kept_on_node
        One file holds several members read through one shared store; a file behind a URL may be read from the
        node's copy (``node_copy_config``).
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
    description: str = ""
    supports_mpio: bool = False
    supports_parts: bool = False
    supports_following: bool = False
    lists_parts: bool = False
    grows_by_appending: bool = False
    snapshots: str = ""
    decode_s_per_atom: Mapping[str, float] = field(default_factory=dict)
    decoding: Mapping[str, str] = field(default_factory=dict)
    supports_slab_reads: bool = False
    fills_rows: bool = False
    ships_offsets: bool = False
    replaced_each_round: bool = False
    takes_h5md_options: bool = False
    stores_atom_labels: bool = False
    reads_urls: bool = False
    reads_given_store: bool = False
    worker_modules: tuple[str, ...] = ()
    shares_file_store: bool = False
    kept_on_node: bool = False

    def __post_init__(self) -> None:
        for name in ("suffixes", "frames_only", "decode_s_per_atom", "decoding"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

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


#: The kind of the Source of a file no other Source claims: MDAnalysis's one-file reader (it goes by the
#: file's extension, through MDAnalysis's own table of formats).
FALLBACK = "mda_part"


@functools.cache
def own_traits() -> tuple[FormatTraits, ...]:
    """The traits of trajscale's own formats (:data:`~trajscale.registered.FORMATS`), in the order files are
    matched: by ``precedence``, the kind named :data:`FALLBACK` last (after other packages' Sources)."""
    found = [load(target) for target in registered.FORMATS]
    return tuple(sorted(found, key=lambda t: (t.kind == FALLBACK, t.precedence)))


@functools.cache
def _formats_by_kind() -> dict[str, FormatTraits]:
    return {t.kind: t for t in own_traits()}


@functools.cache
def _others_by_kind() -> dict[str, FormatTraits]:
    return {t.kind: t for t in map(load, registered.KINDS)}


def traits_of(kind: str) -> FormatTraits | None:
    """The traits of trajscale's Source of ``kind`` (a format's, or another kind's; None: a plugin's); a format's
    is found without importing the other kinds' records."""
    return _formats_by_kind().get(kind) or _others_by_kind().get(kind)


def own_kinds() -> list[str]:
    """The kinds of every Source trajscale has: its formats', in match order, then the others'."""
    return [*_formats_by_kind(), *_others_by_kind()]


def traits_for_format(name: str) -> FormatTraits | None:
    """The traits of the format called ``name`` (any case; None: one only MDAnalysis names, or a plugin's)."""
    name = str(name).upper()
    return next((t for t in own_traits() if name in t.formats), None)


def claiming(head: bytes, name: str = "") -> list[FormatTraits]:
    """The formats whose files may begin with ``head`` (and be named ``name``), in match order: those that
    declare their first bytes, asked without importing a reader."""
    suffix = os.path.splitext(name)[1].lower()
    return [t for t in own_traits() if t.begins is not None and t.may_begin(head, suffix)]


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


__all__ = ["FALLBACK", "FormatTraits", "claiming", "expanders", "frames_only_format", "load", "own_kinds", "own_traits",
           "partial_frames_policy", "read_cost", "traits_for_format", "traits_of"]
