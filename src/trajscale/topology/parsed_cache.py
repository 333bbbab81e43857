"""A cache of parsed topologies: parse a topology file once, load it in milliseconds after.

MDAnalysis parses a TPR in pure-Python XDR; its parsed ``Topology`` unpickles in a fraction of that time, and in
a parallel run that parse is serial work (Khoshlessan et al. 2020). An entry holds the Topology after guessing,
so a cached load guesses nothing. Loading an entry unpickles it, which can run code: entries are kept as every
trajscale cache's (:mod:`trajscale.cache_files`), and one another user owns, or that group or others may write,
is never loaded.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from pathlib import Path

from ..cache_files import read as read_entry
from ..cache_files import write as write_entry
from ..util import cache_root

log = logging.getLogger(__name__)

MAX_ENTRIES = 32   # least recently used entries beyond this are removed
#: Entries hold the Topology with MDAnalysis's guessed attributes (types, masses) added.
ENTRY_FORMAT = "parsed+guessed"
_warned: set[str] = set()


def cache_dir() -> Path:
    return cache_root() / "topologies"


def caches_enabled() -> bool:
    """Whether trajscale's topology caches are on (``TRAJSCALE_TOPOLOGY_CACHE`` is not ``0``)."""
    return os.environ.get("TRAJSCALE_TOPOLOGY_CACHE", "1").lower() not in ("0", "no", "false", "off")


def _entry(topology: str, kw: dict) -> Path:
    import MDAnalysis

    st = os.stat(topology)
    key = repr((ENTRY_FORMAT, os.path.realpath(topology), st.st_size, st.st_mtime_ns, MDAnalysis.__version__,
                sorted((k, repr(v)) for k, v in kw.items())))
    return cache_dir() / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".pkl")


def _warn_once(path, why: str) -> None:
    if str(path) not in _warned:
        _warned.add(str(path))
        log.warning("not using the topology cache %s: %s (it could run another user's code); "
                    "parsing the topology instead", path, why)


def load(topology: str, kw: dict):
    """The cached ``Topology`` of ``topology``, or None (no entry, unreadable, unsafe, or cache off)."""
    if not caches_enabled():
        return None
    path = _entry(topology, kw)
    data = read_entry(path, untrusted=_warn_once)
    if data is None:
        return None
    try:
        return pickle.loads(data)
    except Exception as exc:   # noqa: BLE001 - a damaged or foreign entry (unpickling may raise anything) is a miss
        log.debug("ignoring topology cache entry %s: %s", path, exc)
        return None


def store(topology: str, kw: dict, parsed) -> None:
    """Cache the parsed ``Topology`` of ``topology``; failures only cost the cache."""
    if caches_enabled():
        write_entry(_entry(topology, kw), lambda fh: pickle.dump(parsed, fh, protocol=pickle.HIGHEST_PROTOCOL),
                          f"the topology of {topology}", max_entries=MAX_ENTRIES, untrusted=_warn_once)
