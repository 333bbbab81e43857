"""A cache of parsed topologies: parse a topology file once, load it in milliseconds after.

MDAnalysis parses a 47,681-atom TPR in ~1.4 s (pure-Python XDR); its parsed
``Topology`` unpickles in ~0.03 s. In a parallel run that parse is serial work
on rank 0 or the driver (and per worker for MDAnalysis-read trajectories), so
it caps the speed-up of every short analysis (seed 001: topology opens were a
straggler cause). An entry holds the Topology after MDAnalysis guessed its
missing attributes (a GRO's types and masses: 0.47 s for 45k atoms, more
than the parse), so a cached load guesses nothing. Entries are keyed by the file's real path, size and
modification time and by the MDAnalysis version, written to a temporary name
and renamed, and ignored when they cannot be read.

Location: ``$TRAJSCALE_CACHE_DIR/topologies`` (default
``~/.cache/trajscale/topologies``); ``TRAJSCALE_TOPOLOGY_CACHE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

MAX_ENTRIES = 32   # least recently used entries beyond this are removed
#: Entries hold the Topology with MDAnalysis's guessed attributes (types, masses) added.
ENTRY_FORMAT = "parsed+guessed"


def cache_dir() -> Path:
    root = os.environ.get("TRAJSCALE_CACHE_DIR") or Path.home() / ".cache" / "trajscale"
    return Path(root) / "topologies"


def enabled() -> bool:
    return os.environ.get("TRAJSCALE_TOPOLOGY_CACHE", "1").lower() not in ("0", "no", "false", "off")


def _entry(topology: str, kw: dict) -> Path:
    import MDAnalysis

    st = os.stat(topology)
    key = repr((ENTRY_FORMAT, os.path.realpath(topology), st.st_size, st.st_mtime_ns, MDAnalysis.__version__,
                sorted((k, repr(v)) for k, v in kw.items())))
    return cache_dir() / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".pkl")


def load(topology: str, kw: dict):
    """The cached ``Topology`` of ``topology``, or None (no entry, unreadable, or cache off)."""
    if not enabled():
        return None
    path = _entry(topology, kw)
    try:
        with open(path, "rb") as fh:
            top = pickle.load(fh)
        os.utime(path)   # recently used
        return top
    except FileNotFoundError:
        return None
    except Exception as exc:   # a damaged or foreign entry is only a cache miss
        log.debug("ignoring topology cache entry %s: %s", path, exc)
        return None


def store(topology: str, kw: dict, parsed) -> None:
    """Cache the parsed ``Topology`` of ``topology``; failures only cost the cache."""
    if not enabled():
        return
    path = _entry(topology, kw)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pkl")
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(parsed, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(path.parent)
    except Exception as exc:
        log.debug("could not cache the topology of %s: %s", topology, exc)


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.pkl"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[MAX_ENTRIES:]:
        old.unlink(missing_ok=True)
