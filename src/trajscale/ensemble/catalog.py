"""What an ensemble is: its member trajectories, named, each with its topology, location(s) and labels.

An :class:`Ensemble` is an ordered tuple of :class:`Member` records.  A member is one trajectory,
analysed on its own (its own topology, atom count and selections): ``name`` (unique in the ensemble),
``trajectory`` (one location, or several parts joined as ``trajscale.run`` joins them; local paths or
URLs), ``topology`` (a file the analyses prepare on, as ``trajscale.run``'s topology; None when the
trajectory carries its own), ``labels`` (the catalog's other columns: system, temperature, replica,
...), and ``source`` (a Source config that reads the member, for a member that is one of several
trajectories in a file; None: the trajectory is opened as ``trajscale.run`` opens it).

Where an ensemble comes from
----------------------------
* A catalog, one row per trajectory, as CSV, TOML or Parquet, local or behind a URL
  (:meth:`Ensemble.from_catalog`).  Columns: ``trajectory`` (required), ``topology``, ``name`` and
  ``format`` (optional), and any others, which are the member's labels.  Several parts of one
  trajectory are one cell split as a shell splits words (``"part1.xtc part2.xtc"``, as the command
  line takes them), or a list (TOML, Parquet).  Relative paths are relative to the catalog's folder
  (or URL).  A CSV label whose every value is a whole number (a decimal number) is read as one.
  A TOML catalog is an array of tables ``[[members]]`` with an optional table ``[defaults]`` of
  keys every member has unless it gives its own::

      [defaults]
      topology = "adk.psf"
      system = "adk"

      [[members]]
      trajectory = "rep0.dcd"
      replica = 0

* A glob over a folder or an object-store prefix (:meth:`Ensemble.from_glob`:
  ``"runs/*/md.xtc"``, ``"s3://bucket/mdcath/data/*.h5"``), with one topology for all or none (files
  that carry their own), and labels taken from each path by a regular expression's named groups.
* Members given directly: ``Ensemble([Member(...), ...])``.

Files that hold several trajectories (the expansion hook)
---------------------------------------------------------
One file may hold several member trajectories (an mdCATH file: one per temperature and replica).
:data:`EXPANDERS` names, for each such format, a function ``members(location, base) -> list[Member]
| None`` (``"module:function"``, imported only when used) and the file name patterns it is asked
for.  A row (or a file a glob matched) is offered to an expander when its ``format`` column names
it, or when the row gives no topology and its one location's file name matches one of the
expander's patterns.  The function returns the members the file holds, each with its ``source``
config (how to read it: ``{"kind": ..., ...}`` of a Source in the format registry), its topology
(or None), ``base.labels`` extended with its own (``temperature``, ``replica``) and a name extending
``base.name`` (``"1abcA00/320/0"``); or None when the file is not of its format (the row is then one
member, as usual).  An expander is a plain function of its module: nothing registers itself on
import.
"""

from __future__ import annotations

import csv
import dataclasses
import fnmatch
import glob
import importlib
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import ConfigError, InputFileError
from ..sources.locations import beside, is_local

#: Catalog columns that are no labels.
RESERVED = ("name", "trajectory", "topology", "format")
#: Catalog formats by file name ending.
CATALOG_FORMATS = {".csv": "csv", ".toml": "toml", ".parquet": "parquet", ".pq": "parquet"}


@dataclass(frozen=True, slots=True)
class Member:
    """One trajectory of an ensemble.

    Attributes
    ----------
    name
        Unique in its ensemble: results, the refused table and the report name the member by it.
    trajectory
        Its location(s): a path or URL, or several parts joined into one trajectory (in order).
    topology
        The file the analyses prepare on (selections, masses; as ``trajscale.run``'s topology), or
        None when the trajectory carries its own (an H5MD file that stores its atoms).
    labels
        The catalog's label columns for this member (``{"system": "adk", "replica": 3}``).
    source
        A Source config (``{"kind": ..., ...}``) that reads this member (an expander's: one trajectory of
        a file holding several); None: ``trajectory`` is opened as ``trajscale.run`` opens it.
    """

    name: str
    trajectory: tuple[str, ...]
    topology: str | None = None
    labels: Mapping[str, object] = field(default_factory=dict)
    source: Mapping[str, object] | None = None

    def __post_init__(self) -> None:
        traj = (self.trajectory,) if isinstance(self.trajectory, str | os.PathLike) else tuple(self.trajectory)
        if not traj:
            raise ConfigError(f"ensemble member {self.name!r}: no trajectory given")
        # located once, here: a worker in another folder (a Dask worker, an MPI rank) opens the same files
        object.__setattr__(self, "trajectory", tuple(_absolute(t) for t in traj))
        if self.topology is not None:
            object.__setattr__(self, "topology", _absolute(self.topology))
        object.__setattr__(self, "labels", dict(self.labels))
        bad = [k for k in self.labels if k in RESERVED]
        if bad:
            raise ConfigError(f"ensemble member {self.name!r}: {', '.join(bad)} is a column of its own, not a label")

    @property
    def location(self) -> str:
        """The trajectory for messages: its one location, or its parts joined as a shell would write them."""
        return self.trajectory[0] if len(self.trajectory) == 1 else shlex.join(self.trajectory)

    def row(self) -> dict:
        """The member as a catalog row: name, topology, trajectory (parts joined as a shell writes them),
        then its labels."""
        return {"name": self.name, "topology": self.topology, "trajectory": shlex.join(self.trajectory)
                if len(self.trajectory) > 1 else self.trajectory[0], **self.labels}

    def run_trajectory(self):
        """The trajectory as ``trajscale.run`` takes it: one location, or the list of parts."""
        return self.trajectory[0] if len(self.trajectory) == 1 else list(self.trajectory)


def _absolute(path) -> str:
    """A local path made absolute (in this process's folder); a URL as it is."""
    path = os.fspath(path)
    if not is_local(path):
        return path
    absolute = os.path.abspath(path)
    return path if absolute == path else absolute   # (the same string: a topology rows share is held once)


@dataclass(frozen=True)
class Expander:
    """A format whose one file holds several member trajectories (:data:`EXPANDERS`).

    ``function`` is ``"module:function"``; ``patterns`` are file name patterns (``fnmatch``) of files
    offered to it without a ``format`` column naming it."""

    function: str
    patterns: tuple[str, ...] = ()

    def load(self):
        module, _, name = self.function.partition(":")
        return getattr(importlib.import_module(module), name)

    def claims(self, location: str) -> bool:
        base = location.rstrip("/").rsplit("/", 1)[-1]
        return any(fnmatch.fnmatch(base, p) for p in self.patterns)


#: Formats whose files hold several member trajectories: format name -> :class:`Expander`.
EXPANDERS: dict[str, Expander] = {
    "mdcath": Expander("trajscale.sources.mdcath:ensemble_members", ("mdcath_dataset_*.h5",)),
}


class Ensemble:
    """An ordered collection of member trajectories, analysed the same way in one job.

    Parameters
    ----------
    members
        The :class:`Member` records (names must be unique).
    origin
        Where the members came from (a catalog or a glob), for messages.
    storage_options
        For members behind URLs: fsspec-style options (``endpoint_url``, ``anon``, ...), as a run takes them.

    Examples
    --------
    >>> ens = Ensemble.from_catalog("replicas.csv")        # doctest: +SKIP
    >>> ens = Ensemble.from_glob("runs/rep*/md.xtc", topology="md.tpr",
    ...                          labels=r"rep(?P<replica>\\d+)")   # doctest: +SKIP
    >>> trajscale.run([RMSD(), RadiusOfGyration()], ens, executor="processes")   # doctest: +SKIP
    """

    def __init__(self, members: Iterable[Member], *, origin: str = "", storage_options: Mapping | None = None) -> None:
        self.members: tuple[Member, ...] = tuple(members)
        self.origin = origin
        self.storage_options = dict(storage_options) if storage_options else None
        seen: dict[str, int] = {}
        for i, m in enumerate(self.members):
            if not isinstance(m, Member):
                raise ConfigError(f"ensemble {origin or ''}: member {i} is a {type(m).__name__}, not a Member")
            if m.name in seen:
                raise ConfigError(f"ensemble {origin or ''}: two members are named {m.name!r} (rows {seen[m.name] + 1} "
                                  f"and {i + 1}); give each a name of its own (a name column)")
            seen[m.name] = i
        self._index = seen

    # -- the collection ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self) -> Iterator[Member]:
        return iter(self.members)

    def __getitem__(self, key: int | str) -> Member:
        """A member by position or by name."""
        if isinstance(key, str):
            try:
                return self.members[self._index[key]]
            except KeyError:
                raise KeyError(f"no member named {key!r} in the ensemble") from None
        return self.members[key]

    def __repr__(self) -> str:
        return f"Ensemble({len(self)} members{f' from {self.origin}' if self.origin else ''})"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members)

    @property
    def label_names(self) -> tuple[str, ...]:
        """Every label any member has, in the order first met."""
        return tuple(dict.fromkeys(k for m in self.members for k in m.labels))

    def where(self, **labels) -> Ensemble:
        """The members whose labels equal each of ``labels`` (``ens.where(system="adk")``)."""
        kept = [m for m in self.members if all(m.labels.get(k) == v for k, v in labels.items())]
        return Ensemble(kept, origin=self.origin, storage_options=self.storage_options)

    def rows(self) -> list[dict]:
        """Each member as a catalog row (:meth:`Member.row`)."""
        return [m.row() for m in self.members]

    # -- making one ---------------------------------------------------------------------------------------------
    @classmethod
    def of(cls, value, storage_options: Mapping | None = None) -> Ensemble:
        """``value`` as an ensemble: an Ensemble as it is, a list of Members, a pattern with ``*``, ``?`` or
        ``[`` (:meth:`from_glob`), else a catalog file (:meth:`from_catalog`)."""
        if isinstance(value, Ensemble):
            return value
        if isinstance(value, list | tuple):
            return cls(value, storage_options=storage_options)
        text = os.fspath(value)
        if any(c in text for c in "*?[") and not os.path.exists(text):
            return cls.from_glob(text, storage_options=storage_options)
        return cls.from_catalog(text, storage_options=storage_options)

    @classmethod
    def from_catalog(cls, path_or_url, *, storage_options: Mapping | None = None) -> Ensemble:
        """The members a catalog lists (CSV, TOML or Parquet by its name's ending; local or a URL).

        Raises
        ------
        InputFileError
            The catalog cannot be read, or a row lacks its trajectory (the row is named).
        """
        where = os.fspath(path_or_url)
        ext = os.path.splitext(where.split("?")[0])[1].lower()
        kind = CATALOG_FORMATS.get(ext)
        if kind is None:
            raise InputFileError(where, f"an ensemble catalog is {', '.join(CATALOG_FORMATS)} (the ending decides); "
                                        f"{ext or 'no ending'} is none of them")
        data = _catalog_bytes(where, storage_options)
        rows = {"csv": _csv_rows, "toml": _toml_rows, "parquet": _parquet_rows}[kind](data, where)
        return cls(_members_of_rows(rows, where), origin=where, storage_options=storage_options)

    @classmethod
    def from_glob(cls, pattern, *, topology=None, labels: str | None = None,
                  storage_options: Mapping | None = None) -> Ensemble:
        """The files ``pattern`` matches, in sorted order, one member each (or several: an expander's).

        Parameters
        ----------
        pattern
            A glob over a folder (``"runs/**/md.xtc"``, ``**`` matching any depth) or an object-store prefix
            (``"s3://bucket/prefix/*.h5"``; listed, not read).
        topology
            One topology for every member; None: each file carries its own.
        labels
            A regular expression searched in each matched path; its named groups are the member's labels
            (a group of digits only is read as a whole number).
        storage_options
            For an ``s3://`` pattern and its members.
        """
        pattern = os.fspath(pattern)
        found = _list_matches(pattern, storage_options)
        if not found:
            raise InputFileError(pattern, "matches no file")
        regex = re.compile(labels) if labels else None
        rows = []
        for path in found:
            row = {"trajectory": path, "topology": None if topology is None else os.fspath(topology)}
            if regex is not None:
                m = regex.search(path)
                if m is None:
                    raise ConfigError(f"labels {labels!r}: does not match {path}")
                row.update({k: _typed(v) for k, v in m.groupdict().items() if v is not None})
            rows.append(row)
        return cls(_members_of_rows(rows, pattern, relative_to=None), origin=pattern,
                   storage_options=storage_options)


# -- catalogs ---------------------------------------------------------------------------------------------------
def _catalog_bytes(where: str, storage_options: Mapping | None) -> bytes:
    """The catalog's bytes, from a file or the object behind a URL."""
    if not is_local(where):
        from ..storage import using
        from ..storage.opener import open_bytes

        with using(storage_options):
            store = open_bytes(where)
            return bytes(store.read_ranges([(0, store.size)])[0]) if store.size else b""
    try:
        with open(where, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise InputFileError(where, f"cannot read the ensemble catalog: {exc.strerror or exc}") from None


def _csv_rows(data: bytes, where: str) -> list[dict]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputFileError(where, "is not a UTF-8 text CSV catalog") from None
    # (lines, not a StringIO: its buffer takes 4 bytes a character, 50 MB for mdCATH's count of rows)
    reader = csv.DictReader(text.splitlines(keepends=True))
    del text
    if reader.fieldnames is None:
        raise InputFileError(where, "is an empty catalog: give a header row (trajectory, topology, labels...)")
    header = [h.strip() for h in reader.fieldnames]
    rows = []
    for raw in reader:
        if None in raw:
            raise InputFileError(where, f"line {reader.line_num}: more cells than the header's {len(header)} columns")
        rows.append({h: (v.strip() if isinstance(v, str) else v) for h, v in zip(header, raw.values(), strict=True)})
    # a label column of whole numbers (or of numbers) is read as numbers; an empty cell is no value
    for col in header:
        if col in RESERVED:
            for r in rows:
                r[col] = r[col] or None
            continue
        values = [r[col] for r in rows if r[col] not in ("", None)]
        kind = next((k for k in (int, float) if all(_parses(v, k) for v in values)), None) if values else None
        for r in rows:
            v = r[col]
            r[col] = None if v in ("", None) else kind(v) if kind is not None else v
    return rows


def _parses(text: str, kind: type) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


def _typed(text: str):
    return int(text) if text.isdigit() else text


def _toml_rows(data: bytes, where: str) -> list[dict]:
    import tomllib

    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputFileError(where, f"is not a valid TOML catalog: {exc}") from None
    unknown = [k for k in doc if k not in ("members", "defaults")]
    members, defaults = doc.get("members"), doc.get("defaults", {})
    if unknown or not isinstance(members, list) or not isinstance(defaults, dict):
        raise InputFileError(where, "a TOML catalog is an array of tables [[members]] (and an optional table "
                                    f"[defaults]){f'; it has {unknown[0]!r}' if unknown else ''}")
    return [{**defaults, **m} for m in members]


def _parquet_rows(data: bytes, where: str) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"{where}: a Parquet catalog needs pyarrow: pip install 'trajscale[ensemble]'") from None
    import pyarrow as pa

    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputFileError(where, f"is not a readable Parquet catalog: {exc}") from None
    return table.to_pylist()


def _members_of_rows(rows: Sequence[Mapping], where: str, relative_to: str | None = "") -> list[Member]:
    """Members from catalog rows: paths made absolute against the catalog's folder (``relative_to``: ""
    for ``where``'s own, None for none), expanders asked, names given where the rows give none."""
    base = None if relative_to is None else (relative_to or where)
    if base is not None and is_local(base):
        base = os.path.abspath(base)
    made: list[tuple[Member, bool]] = []   # (member, named by its row or expander)
    topologies: dict[str, str] = {}   # (a topology many rows name is located once, and held once)
    for i, row in enumerate(rows):
        traj = row.get("trajectory")
        if traj is None or traj == "" or traj == []:
            raise InputFileError(where, f"row {i + 1} names no trajectory (column 'trajectory')")
        parts = _parts(traj) if isinstance(traj, str) else [os.fspath(t) for t in traj]
        parts = [_located(p, base) for p in parts]
        topology = row.get("topology")
        if topology:
            topology = os.fspath(topology)
            if topology not in topologies:
                topologies[topology] = _absolute(_located(topology, base))
            topology = topologies[topology]
        else:
            topology = None
        labels = {k: v for k, v in row.items() if k not in RESERVED}
        name = row.get("name")
        member = Member(str(name) if name not in (None, "") else "", tuple(parts), topology, labels)
        expanded = _expand(member, row.get("format"), f"{where}: row {i + 1}")
        if expanded is None:
            made.append((member, name not in (None, "")))
        else:
            made += [(m, True) for m in expanded]
    return _named(made)


def _parts(cell: str) -> list[str]:
    """A catalog cell's locations: split as a shell splits words (a plain path is itself)."""
    return shlex.split(cell) if any(c in cell for c in " \t'\"\\") else [cell]


def _located(path: str, base: str | None) -> str:
    """``path`` from a catalog at ``base``: a URL or an absolute path as it is, else relative to the catalog."""
    if base is None:
        return path
    located = beside(base, path)
    return os.path.normpath(located) if is_local(located) else located


def _expand(member: Member, fmt, where: str) -> list[Member] | None:
    """The members an expander finds in ``member``'s file, or None (not such a file)."""
    if fmt not in (None, ""):
        expander = EXPANDERS.get(str(fmt))
        if expander is None:
            raise ConfigError(f"{where}: format {fmt!r} is not one whose files hold several trajectories; "
                              f"those are {', '.join(EXPANDERS) or 'none'}")
    elif member.topology is None and len(member.trajectory) == 1:
        expander = next((e for e in EXPANDERS.values() if e.claims(member.trajectory[0])), None)
    else:
        expander = None
    if expander is None:
        return None
    if not member.name:
        member = dataclasses.replace(member, name=_stem(member.trajectory[0]))
    return expander.load()(member.trajectory[0], member)


def _stem(location: str) -> str:
    base = location.rstrip("/").rsplit("/", 1)[-1]
    return base.split(".", 1)[0] if not base.startswith(".") else base


def _named(made: list[tuple[Member, bool]]) -> list[Member]:
    """Members without a name get their file's stem, or, where stems repeat, the path that tells them apart."""
    unnamed = [m for m, named in made if not named]
    stems = [_stem(m.trajectory[0]) for m in unnamed]
    clash = {s for s in stems if stems.count(s) > 1}
    if clash:
        paths = [m.trajectory[0] for m in unnamed]
        common = os.path.commonpath(paths) if all(is_local(p) for p in paths) else _common_prefix(paths)
    out, k = [], 0
    for m, named in made:
        if named:
            out.append(m)
            continue
        stem = stems[k]
        k += 1
        if stem in clash:
            rel = m.trajectory[0][len(common):].lstrip("/")
            stem = os.path.splitext(rel)[0]
        out.append(dataclasses.replace(m, name=stem))
    return out


def _common_prefix(paths: list[str]) -> str:
    prefix = os.path.commonprefix(paths)
    return prefix[:prefix.rfind("/") + 1]


# -- globs ----------------------------------------------------------------------------------------------------
def _list_matches(pattern: str, storage_options: Mapping | None) -> list[str]:
    """The files (or objects) ``pattern`` matches, sorted."""
    if is_local(pattern):
        return sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    if not pattern.startswith("s3://"):
        raise ConfigError(f"{pattern}: a glob over URLs lists an object-store prefix (s3://BUCKET/PREFIX/*.h5); "
                          "a web server has no listing to glob: give a catalog of its URLs")
    return _list_s3(pattern, storage_options)


def _list_s3(pattern: str, storage_options: Mapping | None) -> list[str]:
    """Objects under the pattern's fixed prefix (one listing) whose keys match the pattern."""
    from ..storage.objects import TIMEOUT, object_store, split_options

    bucket, _, key_pattern = pattern[5:].partition("/")
    if not bucket:
        raise ConfigError(f"{pattern}: give s3://BUCKET/PREFIX/PATTERN")
    fixed = re.split(r"[*?\[]", key_pattern, maxsplit=1)[0]
    prefix = fixed[:fixed.rfind("/") + 1]
    own, fs_options = split_options(storage_options)
    store = object_store("s3", f"s3://{bucket}/{prefix or '_'}", fs_options, float(own.get("timeout", TIMEOUT)))
    import obstore

    regex = re.compile(_glob_regex(key_pattern))
    keys = []
    try:
        for batch in obstore.list(store, prefix=prefix or None):
            keys += [o["path"] for o in batch]
    except Exception as exc:   # noqa: BLE001 - the client's errors, said in one line
        raise InputFileError(pattern, f"cannot list the prefix: {str(exc).splitlines()[0]}") from None
    return sorted(f"s3://{bucket}/{k}" for k in keys if regex.fullmatch(k))


def _glob_regex(pattern: str) -> str:
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


__all__ = ["CATALOG_FORMATS", "EXPANDERS", "Ensemble", "Expander", "Member"]
