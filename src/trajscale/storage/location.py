"""A location: a local path or a URL, with the storage options its bytes are read with; made once, where a
file enters trajscale (the API, the command line, a catalog's row), and passed as it is.

:class:`Location` answers what code above the byte stores asks of a file: its store, size and identity, the
same name in every process (:meth:`~Location.absolute`), a file beside it, and the files under it (a local glob,
or an object store's listing, paged; a glob over an http(s) URL is refused in one line).

Nothing here opens a network client until a URL is listed or read: ``import trajscale`` stays free of them.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ConfigError, InputFileError
from ..util import scheme_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .bytestore import ByteStore
    from .server import Server

#: Characters that make a path a glob pattern.
GLOB_CHARACTERS = "*?["


@dataclass(frozen=True)
class Location:
    """A path or a URL (``where``) and the storage options its bytes are read with: made where a file enters
    trajscale and carried from there (in a Source's config, to a worker), so every process reads with the same
    options. It pickles as those two values; its store is opened in the process that reads.

    Examples
    --------
    >>> Location("s3://bucket/runs/a.xtc").beside("../top.pdb").where
    's3://bucket/top.pdb'
    >>> Location("runs/a.xtc").absolute().where == os.path.abspath("runs/a.xtc")
    True
    """

    where: str
    #: The options given, over the process's (:func:`trajscale.storage.set_options`), taken when it is made.
    options: Mapping | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.where, str):
            object.__setattr__(self, "where", os.fspath(self.where))
        from . import process_options

        object.__setattr__(self, "options", {**process_options(), **dict(self.options or {})})

    @classmethod
    def of(cls, value: Location | str | os.PathLike, options: Mapping | None = None) -> Location:
        """``value`` as a location: a :class:`Location` as it is (with ``options`` where it has none), else new."""
        if isinstance(value, Location):
            return value if not options or value.options else Location(value.where, options)
        return cls(os.fspath(value), options)

    @classmethod
    def each(cls, value, options: Mapping | None = None) -> list[Location]:
        """``value`` (a path, URL or Location, or several in order) as Locations, each :meth:`of` it."""
        return [cls.of(v, options) for v in ([value] if isinstance(value, str | os.PathLike) else value)]

    def __str__(self) -> str:
        return self.where

    def __fspath__(self) -> str:   # (a Source of a plug-in opens what it is given as a path)
        return self.where

    def __repr__(self) -> str:
        # (no password, and the options' names only: some are credentials, and a repr reaches logs)
        from . import redacted, shown

        return f"Location({redacted(self.where)!r}{f', options: {shown(self.options)}' if self.options else ''})"

    @property
    def scheme(self) -> str | None:
        """The URL scheme's name (``"s3"``, ``"gs"``, ``"az"``, ``"http"``); None for a local path."""
        return scheme_of(self.where)

    @property
    def local(self) -> bool:
        """Whether the bytes are a local file's (a path), not an object's behind a URL."""
        return self.scheme is None

    @property
    def store_class(self) -> type[ByteStore]:
        """The :class:`~trajscale.storage.bytestore.ByteStore` class that reads it, asked without opening it."""
        if self.local:
            from .bytestore import LocalFile

            return LocalFile
        if self.scheme == "hf":
            from .hub import HubObject

            return HubObject
        from .objects import RemoteObject

        return RemoteObject

    @property
    def costs_request(self) -> bool:
        """Whether each read of its bytes costs a request (asked of its store's class, without I/O): its size is
        one, and a process that made one must not fork."""
        return self.store_class.costs_request

    def worker_modules(self, fetched: tuple[str, ...] = ()) -> tuple[str, ...]:
        """What a pool's worker imports to read these bytes (without I/O); nothing for a local file."""
        store = self.store_class
        return (*store.worker_modules, *fetched) if store.costs_request else ()

    def absolute(self) -> Location:
        """The location as every process names it: a local path made absolute (no link resolved), a URL as it is."""
        where = absolute(self.where)
        return self if where == self.where else Location(where, self.options)

    def beside(self, relative: str | os.PathLike) -> Location:
        """``relative`` as a file beside this one names it, same options (``..`` never above the bucket or host)."""
        name = os.fspath(relative)
        if scheme_of(name) is not None or os.path.isabs(name):
            return Location(name, self.options)
        if self.local:
            return Location(os.path.normpath(os.path.join(os.path.dirname(self.where), name)), self.options)
        from . import resolve

        return Location(resolve(self.where, name), self.options)

    def at(self, where: str) -> Location:
        """Another file named in full (``where``), read with this location's options."""
        return Location(where, self.options)

    @property
    def server(self) -> Server:
        """The server of a URL, with this location's options: its store and its outage clock, one per process
        shared by every location and object of it (:mod:`.server`); a local path has none (ConfigError)."""
        if self.local:
            raise ConfigError(f"{self.where}: a local path, not a URL: it has no server")
        from .server import server_of

        return server_of(self.where, self.options)

    def store(self, identity: list | None = None, round_trip: float | None = None) -> ByteStore:
        """Its bytes: a local file, or the object behind the URL read with this location's options (its
        ``identity`` and ``round_trip`` as another process found them: then nothing is asked now)."""
        cls = self.store_class
        if not cls.costs_request:
            return cls(self.where)
        from .objects import Identity

        return cls.open(self.where, dict(self.options), Identity.of(identity), round_trip)

    @property
    def size(self) -> int:
        """Its size in bytes (a ``stat``, or an object's first request); missing, denied, unreachable: one line."""
        if self.local:
            try:
                return os.stat(self.where).st_size
            except OSError as exc:
                raise InputFileError(self.where, exc.strerror or str(exc)) from None
        return self.store().size

    @property
    def identity(self) -> tuple | None:
        """What tells its bytes from a replacement's: a local file's (device, inode, size, mtime_ns); a URL's ETag."""
        if self.local:
            try:
                st = os.stat(self.where)
            except OSError:
                return None
            return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None
        return self.store().identity

    def read(self) -> bytes:
        """All its bytes (a small file: a catalog, an index)."""
        store = self.store()
        return bytes(store.read_ranges([(0, store.size)])[0]) if store.size else b""

    def list(self, pattern: str = "*") -> list[Location]:
        """The files below this folder (or object prefix) matching ``pattern``, sorted (as :func:`glob.glob`)."""
        base = self.where.rstrip("/") if self.where not in ("", "/") else self.where
        joined = f"{base}/{pattern}" if base else pattern
        return Location(joined, self.options)._matches()

    @classmethod
    def glob(cls, pattern: str | os.PathLike | Location, options: Mapping | None = None) -> list[Location]:
        """The files a glob pattern names, sorted: :meth:`list` of the pattern's fixed folder."""
        return cls.of(pattern, options)._matches()

    def _matches(self) -> list[Location]:
        if self.local:   # (glob imported here: a run of files named one by one lists none)
            import glob

            found = (p for p in glob.glob(self.where, recursive=True) if os.path.isfile(p))
            return [Location(p, self.options) for p in sorted(found)]
        if self.scheme == "http":
            raise ConfigError(f"{self.where}: a web server has no listing to glob; give a catalog of its URLs "
                              "(a glob lists an object-store prefix: s3://, gs://, az://, hf://)")
        from .listing import list_keys

        name, head, key_pattern = _split_pattern(self.where)
        if name == "hf":   # (a repository is listed and read at the commit its revision is at now)
            from .hub import pinned

            head = pinned(head, self.options)
        fixed = re.split(r"[*?\[]", key_pattern, maxsplit=1)[0]
        prefix = fixed[:fixed.rfind("/") + 1]   # a store lists whole folders (segments), never part of a name
        regex = re.compile(glob_regex(key_pattern))
        keys = list_keys(self.server, head, prefix, self.where)
        return [Location(head + k, self.options) for k in sorted(k for k in keys if regex.fullmatch(k))]


def _split_pattern(where: str) -> tuple[str, str, str]:
    """(scheme name, the URL up to its key as written, the key pattern) of a glob over an object store."""
    from .clients import split_url

    name, root, key = split_url(where)
    if not root or any(c in root for c in GLOB_CHARACTERS):
        scheme = where.split("://", 1)[0]
        raise ConfigError(f"{where}: give {scheme}://BUCKET/PREFIX/PATTERN (a glob lists the objects of one "
                          f"{'container' if name == 'az' else 'bucket'})")
    head = where[:len(where) - len(key)] if key else where.rstrip("/") + "/"
    return name, head, key


def glob_regex(pattern: str) -> str:
    """A glob as a regular expression over keys: ``*`` and ``?`` stay within a folder, ``**/`` spans any."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i)
            if j < 0:
                out.append(re.escape(c))
            else:
                out.append("[" + pattern[i + 1:j].replace("!", "^", 1) + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def absolute(where: str | os.PathLike) -> str:
    """``where`` as every process names it: a local path made absolute (no link resolved), a URL as it is."""
    where = os.fspath(where)
    return where if scheme_of(where) is not None else os.path.abspath(where)


def has_glob(text: str) -> bool:
    """Whether ``text`` is a glob pattern (holds ``*``, ``?`` or ``[``)."""
    return any(c in text for c in GLOB_CHARACTERS)


__all__ = ["GLOB_CHARACTERS", "Location", "absolute", "glob_regex", "has_glob"]
