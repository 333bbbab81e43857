"""A cache of parsed topologies: parse a topology file once, load it in milliseconds after.

MDAnalysis parses a TPR in pure-Python XDR; its parsed ``Topology`` unpickles
in a small fraction of that time. In a parallel run that parse is serial work
on rank 0 or the driver (and per worker for MDAnalysis-read trajectories), so
it caps the speed-up of every short analysis (Khoshlessan et al. 2020: topology opens were a
straggler cause). An entry holds the Topology after MDAnalysis guessed its
missing attributes (a GRO's types and masses, which cost more than the
parse), so a cached load guesses nothing. Entries are keyed by the file's real path, size and
modification time and by the MDAnalysis version, written to a temporary name
and renamed, and ignored when they cannot be read.

Location: ``$TRAJSCALE_CACHE_DIR/topologies`` (default
``$XDG_CACHE_HOME/trajscale/topologies``, ``~/.cache/trajscale/topologies`` without it);
``TRAJSCALE_TOPOLOGY_CACHE=0`` turns it off.

Loading an entry unpickles it, which can run code: the folder is created
0700, and a folder or entry that another user owns, or that group or others
may write, is never loaded (one warning, then the topology is parsed).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import re
from pathlib import Path

from ..util import cache_root, why_untrusted

log = logging.getLogger(__name__)

MAX_ENTRIES = 32   # least recently used entries beyond this are removed
#: Entries hold the Topology with MDAnalysis's guessed attributes (types, masses) added.
ENTRY_FORMAT = "parsed+guessed"
_ENTRY_NAME = re.compile(r"^[0-9a-f]{32}\.pkl$")   # finished entries; temporaries start with "."
_warned: set[str] = set()


def cache_dir() -> Path:
    return cache_root() / "topologies"


def enabled() -> bool:
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


def _safe_folder(folder: Path, create: bool) -> bool:
    """True if ``folder`` is ours and closed to others (created 0700 when ``create``)."""
    if create and not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return False
    why = why_untrusted(st)
    if why:
        _warn_once(folder, why)
    return why is None


def load(topology: str, kw: dict):
    """The cached ``Topology`` of ``topology``, or None (no entry, unreadable, unsafe, or cache off)."""
    if not enabled():
        return None
    path = _entry(topology, kw)
    try:
        if not _safe_folder(path.parent, create=False):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:   # e.g. a symlink planted under an entry's name
        _warn_once(path, f"cannot open it safely ({exc.strerror})")
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            why = why_untrusted(os.fstat(fh.fileno()))
            if why:
                _warn_once(path, why)
                return None
            top = pickle.load(fh)
        os.utime(path)   # recently used
        return top
    except Exception as exc:   # noqa: BLE001 - a damaged or foreign entry (unpickling may raise anything) is a miss
        log.debug("ignoring topology cache entry %s: %s", path, exc)
        return None


def store(topology: str, kw: dict, parsed) -> None:
    """Cache the parsed ``Topology`` of ``topology``; failures only cost the cache."""
    if not enabled():
        return
    import tempfile  # only a run that writes an entry needs it (with shutil, bz2, lzma, random)

    path = _entry(topology, kw)
    try:
        if not _safe_folder(path.parent, create=True):
            return
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pkl")   # mode 0600
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(parsed, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(path.parent)
    except Exception as exc:   # noqa: BLE001 - a cache that cannot be written is only a miss next time
        log.debug("could not cache the topology of %s: %s", topology, exc)


def _prune(folder: Path) -> None:
    """Remove the least recently used finished entries; another writer's temporary is never touched."""
    entries = []
    for p in folder.iterdir():
        if _ENTRY_NAME.match(p.name):
            try:
                entries.append((p.stat().st_mtime, p))
            except FileNotFoundError:   # pruned by another process meanwhile
                continue
    entries.sort(reverse=True)
    for _, old in entries[MAX_ENTRIES:]:
        old.unlink(missing_ok=True)
