"""A PDB or GRO topology's per-atom labels from the text's fixed columns, as MDAnalysis's parsers read them.

Each function follows one MDAnalysis parser's rules (``PDBParser`` 2.10 and later, ``GROParser``, the default
guesser's tables read as text) column by column, NumPy over a grid of characters, and declines (None) wherever
MDAnalysis might read the text otherwise: the caller then asks MDAnalysis.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
from pathlib import Path

import numpy as np

from ..util import LRU

#: The PDB's fixed columns MDAnalysis's PDB parser reads (0-based, end excluded, of the stripped line).
FIELDS = {"name": (12, 16), "altloc": (16, 17), "resname": (17, 21), "chainid": (21, 22), "resid": (22, 26),
          "icode": (26, 27), "segid": (72, 76), "element": (76, 78)}

#: An atom record of the text, from its first character that is not blank.
_RECORD = re.compile(r"^[ \t]*((?:ATOM|HETATM)[^\n]*)", re.M)

#: The files read as PDB, and as GRO (MDAnalysis's ``guess_format``: by extension, case-insensitive).
PDB_EXTENSIONS = (".pdb", ".ent")
GRO_EXTENSIONS = (".gro",)

#: The most atoms read here: beyond, serial numbers overflow their five columns (MDAnalysis guesses them).
MAX_ATOMS = 99_999

#: The first MDAnalysis whose parser reads segments from columns 73-76 (before: 67-76), and the first whose
#: rules are not known here (3.0 gives an unknown element's mass as NaN, not 0).
_FROM_VERSION, _UNTIL_VERSION = (2, 10), (3, 0)


def end_of_records(text: str) -> int:
    """Where the first line that starts with ``END`` (after blanks) begins: the records read end there."""
    k = text.find("END")
    while k >= 0:
        start = text.rfind("\n", 0, k) + 1
        if not text[start:k].strip():
            return start
        k = text.find("END", k + 3)
    return len(text)


def record_columns(text: str):
    """``(n, cols)``: the first model's atom record count, and ``cols(field)`` (:data:`FIELDS`), stripped."""
    records = _RECORD.findall(text, 0, end_of_records(text))
    width = max(80, max(map(len, records), default=0))
    grid = np.array(records, dtype=f"U{width}").view("U1").reshape(len(records), width)

    @functools.cache
    def cols(field: str) -> np.ndarray:
        lo, hi = FIELDS[field]
        return np.char.strip(np.ascontiguousarray(grid[:, lo:hi]).view(f"U{hi - lo}").reshape(-1))

    return len(records), cols


def wrapped_resids(resid: np.ndarray) -> np.ndarray:
    """Residue numbers as MDAnalysis's PDB parser makes them (5,000 below the one before: 10,000 higher)."""
    if len(resid) and (np.diff(resid) < -5000).any():   # (rare: over 9,999 residues)
        prev = 0
        for k, r in enumerate(resid.tolist()):
            while r - prev < -5000:
                r += 10000
            resid[k] = prev = r
    return resid


def plain_integers(column: np.ndarray) -> bool:
    """Whether every value of a stripped text column is a plain decimal integer (as ``int()`` and NumPy read it)."""
    digits = np.char.lstrip(column, "-")
    return bool((np.char.isdigit(digits) & (np.char.str_len(column) - np.char.str_len(digits) <= 1)).all())


def residue_starts(*keys: np.ndarray) -> np.ndarray:
    """Whether each atom starts a residue: one of ``keys`` differs from the atom before's (``change_squash``)."""
    n = len(keys[0])
    new = np.ones(n, bool)
    if n:
        new[1:] = np.logical_or.reduce([k[1:] != k[:-1] for k in keys])
    return new


def labels_of_text(text: str) -> dict[str, np.ndarray] | None:
    """The labels of PDB ``text`` (newlines ``\n``), or None where MDAnalysis might read it otherwise."""
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError:
        return None
    if raw.translate(None, _PLAIN_CHARACTERS):   # (a character left that is not printable ASCII or a newline)
        return None
    n, cols = record_columns(text)
    if not 0 < n <= MAX_ATOMS:
        return None
    resid_text = cols("resid")
    if not plain_integers(resid_text):
        return None
    resid = wrapped_resids(resid_text.astype(np.int64))
    segid = cols("segid")
    if not _any(segid):   # (MDAnalysis: no segment IDs, the chain IDs)
        segid = cols("chainid")
    resname, icode = cols("resname"), cols("icode")
    resindex = np.cumsum(residue_starts(resid, resname, icode, segid)) - 1
    if not _any(segid):   # (MDAnalysis: no segment nor chain, one segment SYSTEM)
        segid = np.full(n, "SYSTEM")
    return {"name": cols("name"), "resname": resname, "resid": resid, "resindex": resindex, "segid": segid,
            "icode": icode, "element_column": cols("element")}


def _any(text: np.ndarray) -> bool:
    return bool((np.char.str_len(text) > 0).any())


#: The characters read here: printable ASCII and the newline.  Any other (a tab, a control character) MDAnalysis's
#: reading of a line (universal newlines, ``str.strip``) might treat otherwise than these columns do.
_PLAIN_CHARACTERS = bytes(range(0x20, 0x7f)) + b"\n"


def gro_labels_of_text(text: str) -> dict[str, np.ndarray] | None:
    """The labels of GRO ``text`` (newlines ``\n``), or None where MDAnalysis might read it otherwise."""
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError:
        return None
    if raw.translate(None, _PLAIN_CHARACTERS):
        return None
    lines = text.split("\n", 2)
    if len(lines) < 3 or not plain_integers(np.array([lines[1].strip()])):
        return None
    n = int(lines[1])
    records = lines[2].split("\n", n)[:n]
    if not 0 < n <= MAX_ATOMS or len(records) != n:
        return None
    grid = np.array(records, dtype=f"U{max(20, max(map(len, records)))}")
    width = grid.dtype.itemsize // 4
    grid = grid.view("U1").reshape(n, width)

    def col(lo: int, hi: int) -> np.ndarray:
        return np.char.strip(np.ascontiguousarray(grid[:, lo:hi]).view(f"U{hi - lo}").reshape(-1))

    resid_text, resname, name, index = col(0, 5), col(5, 10), col(10, 15), col(15, 20)
    if (np.char.str_len(np.array(records)) < 20).any() or not (plain_integers(resid_text) and plain_integers(index)):
        return None
    if not (np.char.str_len(name) > 0).all():
        return None
    resid = resid_text.astype(np.int64)
    if (resid[1:] == 0).any():   # (MDAnalysis adds 100,000 after a wrap: not read here)
        return None
    resindex = np.cumsum(residue_starts(resid, resname)) - 1
    return {"name": name, "resname": resname, "resid": resid, "resindex": resindex, "segid": np.full(n, "SYSTEM"),
            "icode": np.full(n, ""), "element_column": np.full(n, "")}


def pdb_labels(path: str) -> dict[str, np.ndarray] | None:
    """The labels of the PDB file ``path`` (:func:`labels_of_text`), or None where MDAnalysis must read it."""
    return file_labels(path) if os.path.splitext(str(path))[1].lower() in PDB_EXTENSIONS else None


def file_labels(path: str) -> dict[str, np.ndarray] | None:
    """The labels of the PDB or GRO file ``path`` (by its extension), or None where MDAnalysis must read it."""
    ext = os.path.splitext(str(path))[1].lower()
    if ext not in PDB_EXTENSIONS + GRO_EXTENSIONS or not _version_known():
        return None
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if key in _READ:   # (the selections' and the labels' caches of one new file both ask)
                return _READ.get(key)
            data = fh.read()
    except OSError:
        return None   # MDAnalysis names the problem
    if not data.isascii():
        labels = None
    else:   # (MDAnalysis reads text with universal newlines: "\r\n" and "\r" end a line as "\n" does)
        text = data.decode("ascii").replace("\r\n", "\n").replace("\r", "\n")
        labels = labels_of_text(text) if ext in PDB_EXTENSIONS else gro_labels_of_text(text)
    _READ.put(key, labels)
    return labels


#: The files read last in this process, by their identity (their labels are shared: callers never change them).
_READ = LRU(4)


def guessed_masses(labels: dict[str, np.ndarray]) -> np.ndarray | None:
    """The masses (float64) MDAnalysis's default guesser gives ``labels``' atoms; None without its tables."""
    tables = _tables()
    if tables is None:
        return None
    column = labels["element_column"]
    if _any(column):   # (MDAnalysis: the elements, those not in the periodic table blank; masses of those)
        values, inverse = np.unique(column, return_inverse=True)
        keys = [v.capitalize() if v.capitalize() in tables["symbols"] else "" for v in values.tolist()]
    else:   # (no elements: the types guessed from the names; masses of those)
        values, inverse = np.unique(labels["name"], return_inverse=True)
        guessed = tables["guessed"]   # (names guessed before in this process)
        keys = [guessed[v] if v in guessed else guessed.setdefault(v, _guess_element(v, tables))
                for v in values.tolist()]
    masses = np.array([_mass(k, tables) for k in keys], np.float64)
    return masses[inverse.reshape(-1)]


def read_elements(labels: dict[str, np.ndarray]) -> np.ndarray | None:
    """The elements MDAnalysis's PDB parser gives ``labels``' atoms (blank: none), or None (no column or tables)."""
    tables = _tables()
    column = labels["element_column"]
    if tables is None or not _any(column):
        return None
    values, inverse = np.unique(column, return_inverse=True)
    keys = [v.capitalize() if v.capitalize() in tables["symbols"] else "" for v in values.tolist()]
    return np.array(keys, dtype=str)[inverse.reshape(-1)]


def _mass(element: str, tables: dict) -> float:
    """MDAnalysis's ``DefaultGuesser.get_atom_mass``."""
    masses = tables["masses"]
    if element in masses:
        return masses[element]
    return masses.get(element.upper(), 0.0)


def _guess_element(atomname: str, tables: dict) -> str:
    """MDAnalysis's ``DefaultGuesser.guess_atom_element``."""
    atomelements, elements = tables["atomelements"], tables["elements"]
    if atomname == "":
        return ""
    if atomname.upper() in atomelements:
        return atomelements[atomname.upper()]
    no_symbols = re.sub(r"[*+-]", "", atomname)
    name = re.sub(r"[0-9]", "", no_symbols).upper()
    if name in atomelements:
        return atomelements[name]
    while name:
        if name in elements:
            return name
        if name[:-1] in elements:
            return name[:-1]
        if name[1:] in elements:
            return name[1:]
        if len(name) <= 2:
            return name[0]
        name = name[:-1]
    return no_symbols


def _kv2dict(text: str, convert=str) -> dict:
    """MDAnalysis's ``tables.kv2dict``: a key and its value per line, ``#`` comments and blank lines skipped."""
    d = {}
    for line in text.splitlines():
        line = line.lstrip()
        values = line.split(None, 1)
        if len(values) == 0 or line.startswith("#"):
            continue
        d[values[0]] = convert(values[1])
    return d


@functools.cache
def _tables() -> dict | None:
    """MDAnalysis's guessing tables, read from the text of its ``guesser/tables.py`` (None: not as expected)."""
    try:
        spec = importlib.util.find_spec("MDAnalysis")
        source = Path(spec.origin).with_name("guesser").joinpath("tables.py").read_text()
        found = {}
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if node.targets[0].id in ("TABLE_ATOMELEMENTS", "TABLE_MASSES", "elements", "Z2SYMB"):
                    found[node.targets[0].id] = ast.literal_eval(node.value)
        return {"atomelements": _kv2dict(found["TABLE_ATOMELEMENTS"]),
                "masses": _kv2dict(found["TABLE_MASSES"], float), "elements": list(found["elements"]),
                "symbols": frozenset(found["Z2SYMB"].values()), "guessed": {}}
    except (AttributeError, ImportError, OSError, SyntaxError, ValueError, KeyError, TypeError, IndexError):
        return None


@functools.cache
def _version_known() -> bool:
    """Whether the installed MDAnalysis (read without importing it) reads PDB and GRO by these rules (2.10+, 2.x)."""
    from .selection_cache import mdanalysis_version

    found = re.match(r"(\d+)\.(\d+)", mdanalysis_version() or "")
    return found is not None and _FROM_VERSION <= (int(found[1]), int(found[2])) < _UNTIL_VERSION


__all__ = ["FIELDS", "GRO_EXTENSIONS", "MAX_ATOMS", "PDB_EXTENSIONS", "end_of_records", "file_labels",
           "gro_labels_of_text", "guessed_masses", "labels_of_text", "pdb_labels", "read_elements",
           "plain_integers", "record_columns", "residue_starts", "wrapped_resids"]
