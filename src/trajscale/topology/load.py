"""Loading a topology as an MDAnalysis Universe: any format MDAnalysis parses, or an H5MD file that stores its atoms.

A parsed topology is cached per file version (:mod:`.parsed_cache`), and
MDAnalysis's attribute guessing runs once per distinct atom name.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings

from ..errors import AtomCountMismatchError, InputFileError
from ..formats import claiming, frames_only_format
from ..util import check_input_file
from . import parsed_cache

log = logging.getLogger(__name__)

#: Bytes of a file's head compared with the formats' declared first bytes.
HEAD_BYTES = 8


def _head(path) -> bytes | None:
    """The first bytes of the file at ``path``; None where it cannot be read (check_input_file names the problem)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(HEAD_BYTES)
    except OSError:
        return None


def _may_store_atoms(head: bytes, path) -> bool:
    """Whether a file beginning with ``head`` is, by the formats' declared first bytes, one that may store its
    atoms beside its frames (an H5MD file)."""
    return any(t.stores_atom_labels for t in claiming(head, str(path)))


def trajectory_only_format(path: str) -> str | None:
    """The format's name if ``path`` holds frames only (by extension as MDAnalysis reads it, or its first bytes)."""
    head = _head(path)
    if head is None:
        return None
    if _may_store_atoms(head, path):
        from .h5md import stores_topology  # h5py, only for such a file

        return None if stores_topology(path) else "H5MD/HDF5"   # trajscale's files store their atoms
    root, ext = os.path.splitext(str(path))
    if ext.lower() in (".gz", ".bz2"):
        ext = os.path.splitext(root)[1]
    return frames_only_format(ext[1:])


def load_universe(topology: str, trajectories=(), parsed=None, topology_coordinates: bool = True, **kw):
    """An MDAnalysis Universe, failures in one clear message; ``parsed``: an already parsed Topology (else cached);
    ``topology_coordinates=False`` skips the topology file's coordinates when no trajectory is given."""
    import MDAnalysis as mda

    files = [topology, *trajectories]
    for p in files:
        check_input_file(p)
    if parsed is None and _may_store_atoms(_head(topology) or b"", topology):   # (names, masses, residues)
        from .h5md import h5md_universe

        u = h5md_universe(str(topology), trajectories, **kw)
        if u is not None:
            return u
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if parsed is not None:
                return mda.Universe(parsed, *trajectories, **kw)
            return _universe_via_cache(str(topology), list(trajectories), topology_coordinates, kw)
    except ValueError as exc:
        msg = " ".join(str(exc).split())
        if "same number of atoms" in msg or "atoms" in msg and "number" in msg:
            raise AtomCountMismatchError(
                f"{topology} and {', '.join(map(str, trajectories))}: different atom counts ({msg})") from None
        raise InputFileError(files[-1], f"MDAnalysis cannot read it: {msg}") from None
    except (OSError, EOFError, TypeError, KeyError, RuntimeError, IndexError) as exc:
        detail = " ".join(str(exc).split()) or (
            "the file ends early (truncated?)" if isinstance(exc, EOFError) else type(exc).__name__)
        raise InputFileError(files[-1], f"MDAnalysis cannot read it: {detail}") from None


def _universe_via_cache(topology: str, trajectories: list, topology_coordinates: bool, kw: dict):
    """``mda.Universe(topology, *trajectories, **kw)``, its topology parsed once per file version."""
    import MDAnalysis as mda
    from MDAnalysis.core._get_readers import get_parser_for, get_reader_for

    if not trajectories and topology_coordinates:
        try:   # as MDAnalysis does: a topology file with coordinates (GRO, PDB) is also the trajectory
            get_reader_for(topology, format=kw.get("topology_format"))
            trajectories = [topology]
        except (ValueError, TypeError):
            pass
    parsed = parsed_cache.load(topology, kw)
    if parsed is not None:
        # the entry holds the guessed attributes: guessing again costs more than the rest of a GRO's load
        u = mda.Universe(parsed, *trajectories, **_without_guessing(kw))
    else:
        # The parser alone: Universe(file) would also read the file's coordinates (a TPR twice).
        try:
            with get_parser_for(topology, format=kw.get("topology_format"))(topology) as parser:
                parsed = parser.parse()
        except Exception as exc:   # noqa: BLE001 - any parser failure is the topology file's, not a trajectory's
            detail = " ".join(str(exc).replace(topology, "the file").split()) or type(exc).__name__
            raise InputFileError(topology, f"MDAnalysis cannot read it as a topology: {detail}") from None
        u = mda.Universe(parsed, *trajectories, **_guessing_once_per_name(kw))
        parsed_cache.store(topology, kw, u._topology)   # parsed + guessed attributes
    u.filename = topology
    return u


@functools.cache
def _name_memo_guesser():
    """MDAnalysis's DefaultGuesser, its pure per-atom lookups memoised per name (most of a large GRO's load)."""
    from MDAnalysis.guesser.default_guesser import DefaultGuesser

    class NameMemoGuesser(DefaultGuesser):
        context = "trajscale-default"   # (MDAnalysis registers every guesser class by its context)

        def __init__(self, *args, **kw) -> None:
            super().__init__(*args, **kw)
            self._elements: dict = {}
            self._masses: dict = {}

        def guess_atom_element(self, atomname):
            return _memo(self._elements, atomname, super().guess_atom_element)

        def get_atom_mass(self, element):
            return _memo(self._masses, element, super().get_atom_mass)

    return NameMemoGuesser


def _memo(cache: dict, key, compute):
    try:
        return cache[key]
    except KeyError:
        out = cache[key] = compute(key)
        return out


def _guessing_once_per_name(kw: dict) -> dict:
    """``kw`` with MDAnalysis's default guessing done once per distinct name (MDAnalysis >= 2.8)."""
    import inspect

    import MDAnalysis as mda

    chosen = kw.get("context", "default") != "default"
    if chosen or "context" not in inspect.signature(mda.Universe.__init__).parameters:
        return kw   # a context the caller chose, or an MDAnalysis before 2.8 (its parsers guess)
    return {**kw, "context": _name_memo_guesser()}


def _without_guessing(kw: dict) -> dict:
    """``kw`` telling ``mda.Universe`` (MDAnalysis >= 2.8) not to guess attributes again."""
    import inspect

    import MDAnalysis as mda

    if "to_guess" not in inspect.signature(mda.Universe.__init__).parameters:
        return kw   # before 2.8 the parser guessed, and the parsed topology holds the result
    return {**kw, "to_guess": (), "force_guess": ()}
