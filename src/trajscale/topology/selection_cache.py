"""A cache of atom selections: a run whose topology and selections were seen before needs no MDAnalysis.

Importing MDAnalysis is the larger part of a short run's start once the topology is parsed and cached. An entry
(JSON: reading one runs no code) keeps, per selection string, the atoms' indices and masses, keyed by the
topology file's identity, the Universe's keyword arguments and the MDAnalysis version. Selections that depend on
coordinates or on another library are never cached: MDAnalysis evaluates them on the first frame every time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
from pathlib import Path

import numpy as np

from ..cache_files import decode_array, encode_array
from ..cache_files import read as read_entry
from ..cache_files import write as write_entry
from ..util import file_identity
from . import parsed_cache

log = logging.getLogger(__name__)

FORMAT = 1
# LRU entries beyond these are removed; a few kB each, thousands kept (an ensemble's members' topologies).
MAX_ENTRIES = 8192
MAX_BYTES = 256 * 2**20

#: Selection keywords whose result depends on coordinates or on a library other than MDAnalysis.
UNCACHEABLE = frozenset({"around", "point", "sphzone", "sphlayer", "isolayer", "cyzone", "cylayer", "prop",
                         "smarts", "aromatic", "chirality", "group", "fullgroup"})
_SAME_COORDINATE = re.compile(r"\bsame\s+[xyz]\s+as\b", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z_]+")


def cacheable(strings: tuple[str, ...]) -> bool:
    """False for selections that depend on coordinates (or another library); those go to MDAnalysis."""
    for s in strings:
        if _SAME_COORDINATE.search(s) or any(w.lower() in UNCACHEABLE for w in _WORD.findall(s)):
            return False
    return True


@functools.cache
def mdanalysis_version() -> str | None:
    """MDAnalysis's version without importing it (its ``version.py``), or None if it is not installed."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("MDAnalysis")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        text = Path(spec.origin).with_name("version.py").read_text()
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        if found:
            return found.group(1)
    except OSError:
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("MDAnalysis")
    except PackageNotFoundError:
        return None


def cache_dir() -> Path:
    return parsed_cache.cache_dir().parent / "selections"


def entry_key(topology: str, kw: dict, part: str | None = None) -> dict | None:
    """What an entry for ``topology`` must match, or None if nothing may be cached; ``part``: an entry kept apart."""
    version = mdanalysis_version()
    ident = file_identity([topology])[0]
    if version is None or len(ident) == 1:   # no MDAnalysis, or the file cannot be stat-ed
        return None
    key = {"format": FORMAT, "file": list(ident), "mdanalysis": version,
           "kw": sorted([k, repr(v)] for k, v in kw.items())}
    return key if part is None else {**key, "part": part}


def _path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return cache_dir() / f"{digest}.json"


def load(key: dict) -> dict:
    """The entry for ``key`` (``{"n_atoms": ..., "selections": {...}}``), or a new empty one."""
    empty = {"key": key, "n_atoms": None, "selections": {}}
    path = _path(key)
    data = read_entry(path, untrusted=parsed_cache._warn_once)
    if data is None:
        return empty
    try:
        entry = json.loads(data)
    except ValueError as exc:   # a damaged entry is only a cache miss
        log.debug("ignoring selection cache entry %s: %s", path, exc)
        return empty
    if not isinstance(entry, dict) or entry.get("key") != key:   # a hash collision or a damaged entry
        return empty
    return entry


def store(entry: dict) -> None:
    """Write ``entry`` (whole); failures only cost the cache."""
    write_entry(_path(entry["key"]), lambda fh: fh.write(json.dumps(entry).encode()),
                      f"selections of {entry['key']['file'][0]}", max_entries=MAX_ENTRIES, max_bytes=MAX_BYTES,
                      untrusted=parsed_cache._warn_once)


def selection_key(strings: tuple[str, ...]) -> str:
    return json.dumps(list(strings))


def encode(array: np.ndarray, compress: bool = False) -> dict:
    """An entry's array as JSON values (:func:`trajscale.cache_files.encode_array`)."""
    return encode_array(array, compress)


def decode(value: dict) -> np.ndarray:
    """The array :func:`encode` stored (a new, writable array): indices and masses only, never objects."""
    return decode_array(value, "iuf")
