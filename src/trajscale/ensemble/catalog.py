"""What an ensemble is: its member trajectories, named, each with its topology, location(s) and labels.

An :class:`Ensemble` comes from a catalog (CSV, TOML or Parquet, one row per trajectory; docs/ensembles.md
gives the columns), a glob over a folder or an object-store prefix, or members given directly. A format whose
file holds several members (mdCATH) declares in its traits a ``members(location, base)`` function and the name
patterns it is asked for (:class:`~trajscale.formats.FormatTraits`); it returns the file's members (names
extending ``base.name``: ``"1abcA00/320/0"``), or None for a file not of its format.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import ConfigError, InputFileError, TrajscaleError
from ..formats import expanders, load
from ..storage.location import Location, absolute, glob_regex, has_glob
from .columns import MemberColumns

#: Catalog columns that are no labels.
RESERVED = ("name", "trajectory", "topology", "format")
#: Catalog formats by file name ending.
CATALOG_FORMATS = {".csv": "csv", ".toml": "toml", ".parquet": "parquet", ".pq": "parquet"}
#: The bounds a catalog is read within, checked before any member is made: rows (an mdCATH-sized data set is
#: 135,000), label columns, characters of a name, label or column name (64 Ki: an output keeps each once a
#: batch, so a long one costs its own size, not a row's share of it), and of a location (PATH_MAX; a URL's
#: key is shorter).
MAX_ROWS = 1_000_000
MAX_LABELS = 256
MAX_NAME = 65_536
MAX_LOCATION = 4096
#: Bytes of a TOML catalog (about 20,000 members; a larger ensemble is a CSV or Parquet catalog): TOML is parsed
#: in Python, at a few MB a second.
MAX_TOML_BYTES = 4 * 2**20


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

    @classmethod
    def made(cls, name: str, trajectory: tuple[str, ...], topology: str | None, labels: dict,
             source: Mapping | None) -> Member:
        """A member of fields checked and located before (by :class:`~.columns.MemberColumns`)."""
        m = object.__new__(cls)
        for f, v in (("name", name), ("trajectory", trajectory), ("topology", topology), ("labels", labels),
                     ("source", source)):
            object.__setattr__(m, f, v)
        return m

    @property
    def location(self) -> str:
        """The trajectory for messages: its one location, or its parts joined as a shell would write them."""
        return self.trajectory[0] if len(self.trajectory) == 1 else shlex.join(self.trajectory)

    def row(self) -> dict:
        """The member as a catalog row (parts joined as a shell writes them)."""
        return {"name": self.name, "topology": self.topology, "trajectory": shlex.join(self.trajectory)
                if len(self.trajectory) > 1 else self.trajectory[0], **self.labels}

    def locations(self) -> list[Location]:
        """The member's files as Locations, with this process's options (for what they tell without I/O)."""
        return [Location(t) for t in self.trajectory]

    def run_trajectory(self):
        """The trajectory as ``trajscale.run`` takes it: one location, or the list of parts."""
        return self.trajectory[0] if len(self.trajectory) == 1 else list(self.trajectory)


def _absolute(path) -> str:
    """A location as every process names it (:meth:`Location.absolute`)."""
    path = os.fspath(path)
    where = absolute(path)
    return path if where == path else where   # (the same string: a topology rows share is held once)


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
        self.origin = origin
        self.storage_options = dict(storage_options) if storage_options else None
        self._members = MemberColumns(members, Member, origin)   # (held as columns: a member is made when asked for)

    @property
    def members(self) -> Sequence[Member]:
        """The members, in order (each made when asked for)."""
        return self._members

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Member]:
        return iter(self._members)

    def __getitem__(self, key: int | str | slice) -> Member | Ensemble:
        """A member by position or by name; a slice of them: an ensemble of the same origin and options."""
        if isinstance(key, slice):
            return Ensemble(self.members[key], origin=self.origin, storage_options=self.storage_options)
        if isinstance(key, str):
            i = self._members.index_of(key)
            if i is None:
                raise KeyError(f"no member named {key!r} in the ensemble")
            return self._members[i]
        return self._members[key]

    def index_of(self, name: str) -> int | None:
        """The position of the member named ``name``; None when none is."""
        return self._members.index_of(name)

    def __repr__(self) -> str:
        return f"Ensemble({len(self)} members{f' from {self.origin}' if self.origin else ''})"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._members.name(i) for i in range(len(self)))

    @property
    def label_names(self) -> tuple[str, ...]:
        """Every label any member has, in the order first met."""
        return self._members.label_names

    def where(self, **labels) -> Ensemble:
        """The members whose labels equal each of ``labels`` (``ens.where(system="adk")``)."""
        kept = [m for m in self.members if all(m.labels.get(k) == v for k, v in labels.items())]
        return Ensemble(kept, origin=self.origin, storage_options=self.storage_options)

    def rows(self) -> list[dict]:
        """Each member as a catalog row (:meth:`Member.row`)."""
        return [m.row() for m in self.members]

    @classmethod
    def of(cls, value, storage_options: Mapping | None = None, *, topology=None,
           labels: str | None = None) -> Ensemble:
        """``value`` as an ensemble: an Ensemble as it is, a list of Members, a pattern with ``*``, ``?`` or
        ``[`` (:meth:`from_glob`, with ``topology`` and ``labels``), a catalog file (:meth:`from_catalog`:
        ``.csv``, ``.toml``, ``.parquet``), one file that holds several trajectories (an mdCATH file: each a
        member), or, given its ``topology``, one trajectory file (:meth:`from_files`)."""
        if isinstance(value, Ensemble | list | tuple) or _catalog_kind(value) is not None:
            if topology is not None or labels is not None:
                raise ConfigError(f"{value if isinstance(value, str | os.PathLike) else 'an ensemble'}: names "
                                  "its trajectories' topologies and labels itself; a topology or labels are "
                                  "given with a glob (or one file)")
            if isinstance(value, Ensemble):
                return value
            if isinstance(value, list | tuple):
                return cls(value, storage_options=storage_options)
            return cls.from_catalog(value, storage_options=storage_options)
        text = os.fspath(value)
        if has_glob(text) and not os.path.exists(text):
            return cls.from_glob(text, topology=topology, labels=labels, storage_options=storage_options)
        if topology is None and not any(t.holds_members(text) for t in expanders().values()) \
                and _told_held(Member("", (text,), None), Location(text, storage_options)) is None:
            return cls.from_catalog(text, storage_options=storage_options)   # (its error says what a catalog is)
        return cls.from_files([text], topology=topology, labels=labels, origin=text, storage_options=storage_options)

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
        catalog = Location(where, storage_options).absolute()
        try:
            data = catalog.read()
        except OSError as exc:
            raise InputFileError(where, f"cannot read the ensemble catalog: {exc.strerror or exc}") from None
        rows = {"csv": _csv_rows, "toml": _toml_rows, "parquet": _parquet_rows}[kind](data, where)
        return cls(_named(_rows_made(_bounded(rows, where), catalog, where)), origin=where,
                   storage_options=storage_options)

    @classmethod
    def from_glob(cls, pattern, *, topology=None, labels: str | None = None,
                  storage_options: Mapping | None = None) -> Ensemble:
        """The files ``pattern`` matches, in sorted order, one member each (or several: an expander's).

        Parameters
        ----------
        pattern
            A glob over a folder (``"runs/**/md.xtc"``, ``**`` matching any depth) or an object-store prefix
            (``"s3://bucket/prefix/*.h5"``, ``gs://``, ``az://``: the prefix's fixed folder listed once, paged;
            no object read).
        topology
            One topology for every member (a path or URL); None: each file carries its own.  A topology with
            the pattern's wildcards gives each file its own: they stand for what the pattern's matched, in
            order (``"runs/*/md.tpr"`` for ``"runs/*/md.xtc"``); so do ``{label}`` fields, filled from
            ``labels``' groups (``"tops/{system}.psf"``).
        labels
            A regular expression searched in each matched path; its named groups are the member's labels
            (a group of digits only is read as a whole number).
        storage_options
            For an object-store pattern and its members.
        """
        pattern = os.fspath(pattern)
        found = [m.where for m in Location.glob(pattern, storage_options)]
        if not found:
            raise InputFileError(pattern, "matches no file")
        return cls.from_files(found, topology=topology, labels=labels, origin=pattern, pattern=pattern,
                              storage_options=storage_options)

    @classmethod
    def from_files(cls, files: Sequence, *, topology=None, labels: str | None = None, origin: str = "",
                   pattern: str | None = None, storage_options: Mapping | None = None) -> Ensemble:
        """One member per file in ``files`` (or each trajectory a file holds); ``topology``, ``labels`` as
        :meth:`from_glob` takes them, ``pattern`` the glob that matched the files."""
        regex = re.compile(labels) if labels else None
        rows = []
        for path in map(os.fspath, files):
            row = {"trajectory": path, "topology": None}
            if regex is not None:
                m = regex.search(path)
                if m is None:
                    raise ConfigError(f"labels {labels!r}: does not match {path}")
                row.update({k: int(v) if v.isdigit() else v for k, v in m.groupdict().items() if v is not None})
            if topology is not None:
                row["topology"] = _topology_of(os.fspath(topology), pattern, path, row)
            rows.append(row)
        origin_of = Location(origin or (files[0] if files else ""), storage_options)
        return cls(_named(_rows_made(rows, origin_of, origin_of.where, relative=False)), origin=origin,
                   storage_options=storage_options)


def _catalog_kind(value) -> str | None:
    if not isinstance(value, str | os.PathLike):
        return None
    return CATALOG_FORMATS.get(os.path.splitext(os.fspath(value).split("?")[0])[1].lower())


def _topology_of(topology: str, pattern: str | None, path: str, labels: Mapping) -> str:
    """``topology`` with its ``{label}`` fields and wildcards filled from ``path``'s labels and matches."""
    if "{" in topology:
        try:
            topology = topology.format(**{k: v for k, v in labels.items() if k not in RESERVED})
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"topology {topology!r}: {exc} is no label of {path} (labels give the fields "
                              "a topology names in braces)") from None
    wild = _WILDCARD.findall(topology)
    if not wild:
        return topology
    parts = _WILDCARD.findall(pattern or "")
    if len(parts) != len(wild):
        raise ConfigError(f"topology {topology!r}: its {len(wild)} wildcard(s) stand for what the glob's matched; "
                          f"{pattern or 'one file'} has {len(parts)}")
    m = re.fullmatch("".join(f"({glob_regex(p)})" if _WILDCARD.fullmatch(p) else re.escape(p)
                             for p in _WILDCARD.split(pattern)), path)
    if m is None:   # (a listing's keys are the pattern's own: this is a path the pattern did not match)
        raise ConfigError(f"topology {topology!r}: {path} is not one of {pattern}'s matches")
    pieces = iter(m.groups())
    return _WILDCARD.sub(lambda _: next(pieces), topology)


#: A glob's wildcards: ``**/``, ``*``, ``?``, ``[...]``.
_WILDCARD = re.compile(r"(\*\*/|\*|\?|\[[^\]]*\])")


def _csv_rows(data: bytes, where: str) -> Iterator[dict]:
    """The rows one at a time, read as columns first (every row decides a label's type), never all held twice."""
    import io

    def lines():
        for k, raw in enumerate(io.BytesIO(data)):   # (the bytes' lines one at a time, not a list of them)
            try:
                yield raw.decode("utf-8-sig" if k == 0 else "utf-8")
            except UnicodeDecodeError:
                raise InputFileError(where, "is not a UTF-8 text CSV catalog") from None

    reader = csv.reader(lines())

    def records() -> Iterator[list[str]]:
        try:   # (csv's own limit on a cell, 128 KiB, says a line is no catalog's: its error is one line here)
            yield from reader
        except csv.Error as exc:
            raise InputFileError(where, f"line {reader.line_num}: is not a CSV catalog's ({exc})") from None

    rows = records()
    head = next(rows, None)
    if head is None:
        raise InputFileError(where, "is an empty catalog: give a header row (trajectory, topology, labels...)")
    header = [h.strip() for h in head]
    _check_columns(header, where)
    columns: list[list] = [[] for _ in header]
    seen: dict[str, str] = {}   # (a topology many rows name: held once)
    topology = header.index("topology") if "topology" in header else -1
    for raw in rows:
        if not raw:
            continue   # (a blank line, as DictReader passes over it)
        if len(raw) > len(header):
            raise InputFileError(where, f"line {reader.line_num}: more cells than the header's {len(header)} columns")
        if columns and len(columns[0]) == MAX_ROWS:
            raise _too_many(where)
        raw += [None] * (len(header) - len(raw))
        for k, v in enumerate(raw):
            v = v.strip() if isinstance(v, str) else v
            columns[k].append(seen.setdefault(v, v) if k == topology and v else v)
    del seen
    # a label column of whole numbers (or of numbers) is read as numbers; an empty cell is no value
    for h, col in zip(header, columns, strict=True):
        if h in RESERVED:
            col[:] = [v or None for v in col]
            continue
        values = [v for v in col if v not in ("", None)]
        kind = next((k for k in (int, float) if all(_parses(v, k) for v in values)), None) if values else None
        col[:] = [None if v in ("", None) else kind(v) if kind is not None else v for v in col]
        del values
    for r in range(len(columns[0]) if columns else 0):
        yield {h: col[r] for h, col in zip(header, columns, strict=True)}
        for col in columns:
            col[r] = None   # (handed on: the member made of it holds what it keeps)


def _parses(text: str, kind: type) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


def _toml_rows(data: bytes, where: str) -> list[dict]:
    import tomllib

    if len(data) > MAX_TOML_BYTES:
        raise InputFileError(where, f"is a TOML catalog of {len(data) / 2**20:.0f} MiB: one is at most "
                                    f"{MAX_TOML_BYTES // 2**20} MiB; give a larger ensemble as a CSV or Parquet "
                                    "catalog")
    try:
        text = data.decode("utf-8")
        # tomllib takes time quadratic in a dotted key's parts, and reads nested arrays and tables by recursion
        if _DOTTED.search(text):
            raise RecursionError
        doc = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputFileError(where, f"is not a valid TOML catalog: {exc}") from None
    except RecursionError:
        raise InputFileError(where, "is not a TOML catalog: its keys, arrays or tables are nested too deep") from None
    unknown = [k for k in doc if k not in ("members", "defaults")]
    members, defaults = doc.get("members"), doc.get("defaults", {})
    if unknown or not isinstance(members, list) or not isinstance(defaults, dict) \
            or not all(isinstance(m, dict) for m in members):
        raise InputFileError(where, "a TOML catalog is an array of tables [[members]] (and an optional table "
                                    f"[defaults]){f'; it has {_cut(unknown[0])!r}' if unknown else ''}")
    _check_columns(dict.fromkeys(k for m in (defaults, *members) for k in m), where)
    return [{**defaults, **m} for m in members]


#: A TOML key of more dotted parts than a catalog's tables nest (one: ``[defaults]``), where keys start (a line,
#: a table's header, an inline table's entry), each part a bare or quoted key (matched in time linear in the text).
_DOTTED = re.compile(r"""(?:^|[\[{,])[ \t]*+(?:(?:[\w-]++|"[^"\n]*+"|'[^'\n]*+')[ \t]*+\.[ \t]*+){16}""",
                     re.MULTILINE)


def _parquet_rows(data: bytes, where: str) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"{where}: a Parquet catalog needs pyarrow: pip install 'trajscale[ensemble]'") from None
    import pyarrow as pa

    try:
        meta = pq.ParquetFile(pa.BufferReader(data)).metadata   # (the bounds from the footer, before the rows)
        if meta.num_rows > MAX_ROWS:
            raise _too_many(where)
        _check_columns(meta.schema.to_arrow_schema().names, where)
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputFileError(where, f"is not a readable Parquet catalog: {exc}") from None
    return table.to_pylist()


def _check_columns(names: Iterable[str], where: str) -> None:
    """Refuse a catalog of more label columns than :data:`MAX_LABELS`, or a column name past :data:`MAX_NAME`."""
    names = list(names)
    if len([n for n in names if n not in RESERVED]) > MAX_LABELS:
        raise InputFileError(where, f"has {len(names):,} columns: a catalog's labels are at most {MAX_LABELS}")
    long = next((n for n in names if len(n) > MAX_NAME), None)
    if long is not None:
        raise InputFileError(where, f"a column is named by {len(long):,} characters ({_cut(long)!r}...): "
                                    f"a label's name is at most {MAX_NAME}")


def _too_many(where: str) -> InputFileError:
    return InputFileError(where, f"has more than {MAX_ROWS:,} rows: split it into catalogs of fewer")


def _bounded(rows: Iterable[Mapping], where: str) -> Iterator[Mapping]:
    """``rows``, each checked: at most :data:`MAX_ROWS`, its cells of the types and sizes a member takes."""
    for i, row in enumerate(rows):
        if i == MAX_ROWS:
            raise _too_many(where)
        problem = _bad_cell(row)
        if problem:
            raise InputFileError(where, f"row {i + 1}: {problem}")
        yield row


#: The parts of one trajectory a cell may join (a longer cell is no catalog's).
_MAX_PARTS = 4096
#: A label's values: text, numbers, true or false (or none).
_LABEL_TYPES = (str, int, float, bool, type(None))


def _bad_cell(row: Mapping) -> str | None:
    """What is wrong with one of ``row``'s cells, in words; None when each is a member's."""
    for key, v in row.items():
        if key == "trajectory" and v is not None:
            parts = (_parts(v) if len(v) <= _MAX_PARTS * MAX_LOCATION else None) if isinstance(v, str) \
                else list(v) if isinstance(v, list | tuple) else None
            if parts is None or not all(isinstance(p, str) for p in parts):
                return (f"trajectory is {_kind(v)}: give a path or URL, or a list of them (the parts of one "
                        "trajectory)")
            long = next((p for p in parts if len(p) > MAX_LOCATION), None)
            if long is not None:
                return (f"trajectory {_cut(long)!r}... is {len(long):,} characters long: a path is at most "
                        f"{MAX_LOCATION}")
        elif key in ("topology", "format") and v is not None and not isinstance(v, str):
            return f"{key} is {_kind(v)}: give a path or URL" if key == "topology" else f"format is {_kind(v)}"
        elif key in ("topology", "format") and v is not None and len(v) > MAX_LOCATION:
            return f"{key} {_cut(v)!r}... is {len(v):,} characters long: a path is at most {MAX_LOCATION}"
        elif key not in RESERVED or key == "name":
            what = "name" if key == "name" else f"label {_cut(key)!r}"
            if not isinstance(v, _LABEL_TYPES) or (key == "name" and isinstance(v, bool | float)):
                return f"{what} is {_kind(v)}: give text{' or a number' if key != 'name' else ''}"
            if isinstance(v, str) and len(v) > MAX_NAME:
                return f"{what} {_cut(v)!r}... is {len(v):,} characters long: at most {MAX_NAME}"
    return None


def _kind(value) -> str:
    """What ``value`` is, in words: the type, and for a list what it holds first."""
    if not isinstance(value, list | tuple):
        return {dict: "a table", str: "text", bool: "true/false", int: "a number", float: "a number"}.get(
            type(value), f"a {type(value).__name__}")
    if not value:
        return "an empty list"
    first = type(value[0])
    return "a list of " + {list: "lists", tuple: "lists", dict: "tables", str: "text", bool: "true/false",
                           int: "numbers", float: "numbers"}.get(first, f"{first.__name__} values")


def _cut(text: str, n: int = 40) -> str:
    return text[:n]


def _rows_made(rows: Iterable[Mapping], origin: Location, where: str,
               relative: bool = True) -> Iterator[tuple[Member, bool]]:
    """Members from catalog rows, their paths relative to ``origin`` (absolute: the catalog, whose options read
    them) unless not ``relative``; ``where`` names the catalog in messages."""
    base = origin if relative else None
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
        expanded = _expand(member, row.get("format"), origin, f"{where}: row {i + 1}")
        if expanded is None:
            yield member, name not in (None, "")
        else:
            yield from ((m, True) for m in expanded)


def _parts(cell: str) -> list[str]:
    return shlex.split(cell) if any(c in cell for c in " \t'\"\\") else [cell]


def _located(path: str, base: Location | None) -> str:
    return path if base is None else base.beside(path).where


def _expand(member: Member, fmt, origin: Location, where: str) -> list[Member] | None:
    """The members an expander finds in ``member``'s file (read with ``origin``'s options), or None (not such a
    file)."""
    holding = expanders()   # (each format's declared traits say whether its files hold several)
    if fmt not in (None, ""):
        expander = holding.get(str(fmt).lower())
        if expander is None:
            raise ConfigError(f"{where}: format {fmt!r} is not one whose files hold several trajectories; "
                              f"those are {', '.join(holding) or 'none'}")
    elif member.topology is None and len(member.trajectory) == 1:
        expander = next((t for t in holding.values() if t.holds_members(member.trajectory[0])), None)
        if expander is None:   # (a file named otherwise: told by its own bytes)
            return _told_held(member, origin)
    else:
        expander = None
    if expander is None:
        return None
    if not member.name:
        member = dataclasses.replace(member, name=_stem(member.trajectory[0]))
    return load(expander.members)(origin.at(member.trajectory[0]), member)


def _told_held(member: Member, origin: Location) -> list[Member] | None:
    """The members ``member``'s one file (read with ``origin``'s options) holds, as an expander tells from its
    bytes; None for one trajectory."""
    path = member.trajectory[0]
    suffix = os.path.splitext(path.split("?")[0])[1].lower()
    if not any(suffix not in t.not_named for t in expanders().values()):
        return None
    named = member if member.name else dataclasses.replace(member, name=_stem(path))
    try:
        return members_held(origin.at(path), named)
    except (TrajscaleError, OSError):
        return None


def members_held(location: Location, base: Member) -> list[Member] | None:
    """The members the file at ``location`` holds, whatever its name (each expander tells its files by their
    bytes); None for a file of one trajectory."""
    for traits in expanders().values():
        found = load(traits.members)(location, base)
        if found is not None:
            return found
    return None


def _stem(location: str) -> str:
    base = location.rstrip("/").rsplit("/", 1)[-1]
    return base.split(".", 1)[0] if not base.startswith(".") else base


def _named(made: Iterable[tuple[Member, bool]]) -> Iterator[Member]:
    """Unnamed members get their file's stem, or where stems repeat the path that tells them apart."""
    held: list[tuple[Member, bool]] = []
    for m, named in made:
        if named and not held:
            yield m
        else:
            held.append((m, named))
    if not held:
        return
    unnamed = [m for m, named in held if not named]
    stems = [_stem(m.trajectory[0]) for m in unnamed]
    clash = {s for s, n in Counter(stems).items() if n > 1}   # (counted once: a glob may match 100,000 files)
    if clash:
        prefix = os.path.commonprefix([m.trajectory[0] for m in unnamed])
        common = prefix[:prefix.rfind("/") + 1]
    k = 0
    for m, named in held:
        if named:
            yield m
            continue
        stem = stems[k]
        k += 1
        if stem in clash:
            rel = m.trajectory[0][len(common):].lstrip("/")
            stem = os.path.splitext(rel)[0]
        yield dataclasses.replace(m, name=stem)


__all__ = ["CATALOG_FORMATS", "Ensemble", "Member", "members_held"]
