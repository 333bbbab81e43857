"""mdCATH's file layout: what a file holds, checked field by field, and where each member's data lie.

:func:`describe` checks one member of an open file and gives its :class:`MemberLayout`, what
:class:`~.mdcath.MDCATHSource` reads by. :func:`members` lists a file's members with their labels,
:func:`pdb_text` and :func:`universe` give its topology. HDF5's view of a file is the one
:mod:`trajscale.hdf5.files` opens for any store.
"""

from __future__ import annotations

import io
import logging
import os
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CutShortError, InputFileError
from ..hdf5.superblock import superblock_end
from ..storage.bytestore import ByteStore, ReadOnlyFile
from ..storage.location import Location
from ..util import HDF5_MAGIC, LRU

if TYPE_CHECKING:   # (h5py is imported where a file's HDF5 is read: a described file needs none)
    import h5py

log = logging.getLogger(__name__)

#: What separates a file's location from a member's key (``file.h5#348/0``).
MEMBER_SEP = "#"
#: Picoseconds between saved frames (mdCATH's ``MDCATH_PICOSECONDS_PER_FRAME``).
FRAME_PS = 1000.0
#: kcal -> kJ (thermochemical calorie): forces are handed out in MDAnalysis's kJ/(mol Å).
KCAL_TO_KJ = 4.184
#: Length units the layout's ``unit`` attributes may name, in Å.
_LENGTH_UNITS = {"angstrom": 1.0, "a": 1.0, "\u00e5": 1.0, "nm": 10.0, "nanometer": 10.0}
_FORCE_UNITS = {"kcal/mol/angstrom": KCAL_TO_KJ, "kcal/(mol*angstrom)": KCAL_TO_KJ,
                "kj/mol/angstrom": 1.0, "kj/(mol*angstrom)": 1.0, "kj/mol/nm": 0.1, "kj/(mol*nm)": 0.1}


def split_member(location: str) -> tuple[str, str | None]:
    """``(file location, member key or None)`` of ``"file.h5#348/0"`` (a location without ``#``: no key)."""
    location = str(location)
    path, sep, key = location.rpartition(MEMBER_SEP)
    if not sep or "/" not in key:
        return location, None
    return path, key


def member_location(path: str, key: str) -> str:
    """The location naming member ``key`` of the file at ``path`` (``path#key``)."""
    return f"{path}{MEMBER_SEP}{key}"


@dataclass(frozen=True)
class FieldAt:
    """Where one ``(frames, atoms, 3)`` dataset lies: byte offset, NumPy dtype string, factor to MDAnalysis's units."""

    offset: int
    dtype: str
    scale: float


@dataclass(frozen=True)
class MemberLayout:
    """One member as checked by the process that opened it first; ``box``: MDAnalysis dimensions, or None."""

    domain: str
    n_frames: int
    n_atoms: int
    coords: FieldAt
    forces: FieldAt | None
    box: tuple[float, ...] | None
    identity: tuple

    def to_dict(self) -> dict:
        # (by hand: dataclasses.asdict deep-copies, a visible part of describing thousands of members)
        return {"domain": self.domain, "n_frames": self.n_frames, "n_atoms": self.n_atoms,
                "coords": vars(self.coords).copy(), "forces": None if self.forces is None else vars(self.forces).copy(),
                "box": None if self.box is None else list(self.box), "identity": list(self.identity)}

    @classmethod
    def from_dict(cls, d: dict) -> MemberLayout:
        return cls(str(d["domain"]), int(d["n_frames"]), int(d["n_atoms"]), FieldAt(**d["coords"]),
                   None if d.get("forces") is None else FieldAt(**d["forces"]),
                   None if d.get("box") is None else tuple(float(v) for v in d["box"]), tuple(d["identity"]))


def domain_group(f: h5py.File, where: str) -> tuple[str, h5py.Group]:
    """The file's one domain group, or a one-line error."""
    import h5py

    names = list(f.keys())
    if len(names) != 1 or not isinstance(f.get(names[0], getlink=False), h5py.Group):
        raise InputFileError(where, f"not an mdCATH file: its root holds {len(names)} objects, not one domain group")
    return names[0], f[names[0]]


def looks_like_mdcath(f: h5py.File) -> bool:
    """HDF5 whose root holds one group, with a ``pdbProteinAtoms`` dataset in it."""
    import h5py

    names = list(f.keys())
    if len(names) != 1:
        return False
    group = f.get(names[0])
    return isinstance(group, h5py.Group) and isinstance(group.get("pdbProteinAtoms"), h5py.Dataset)


def member_keys(group: h5py.Group) -> list[str]:
    """``"{temperature}/{replica}"`` of every group two levels down, numerically: each a member, whatever it holds."""
    import h5py

    def order(name: str):
        return (0, int(name), "") if name.isdigit() else (1, 0, name)

    keys = []
    for t in sorted(group, key=order):
        # (the class alone: making an object of each of the domain's datasets cost more than the whole walk)
        if group.get(t, getclass=True) is not h5py.Group:
            continue
        tg = group[t]
        keys += [f"{t}/{r}" for r in sorted(tg, key=order) if tg.get(r, getclass=True) is h5py.Group]
    return keys


@dataclass(frozen=True)
class Domain:
    """What a file's members share, looked up once: the domain's name and group, the members' keys, ``z``'s shape."""

    name: str
    group: h5py.Group
    keys: list[str]
    z_shape: tuple | None

    @classmethod
    def of(cls, f: h5py.File, where: str) -> Domain:
        import h5py

        name, group = domain_group(f, where)
        z = group.get("z") if group.get("z", getclass=True) is h5py.Dataset else None
        return cls(name, group, member_keys(group), None if z is None else z.shape)


def member_labels(domain: str, key: str) -> dict:
    t, _, r = key.partition("/")
    return {"domain": domain, "temperature": int(t) if t.isdigit() else t, "replica": int(r) if r.isdigit() else r}


class _Stored:
    """A dataset as HDF5's low-level handle tells it (an h5py ``Dataset`` costs ~0.1 ms to make)."""

    def __init__(self, dsid: h5py.h5d.DatasetID) -> None:
        import h5py

        self.id = dsid
        self.shape = dsid.shape
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.dtype = dsid.dtype
        self.attrs = h5py.AttributeManager(self)
        dcpl = dsid.get_create_plist()
        kind = dcpl.get_layout()
        self.chunks = dcpl.get_chunk() if kind == h5py.h5d.CHUNKED else None
        self.n_filters = dcpl.get_nfilters()
        self.is_virtual = kind == h5py.h5d.VIRTUAL
        self.external = dcpl.get_external_count() > 0

    def read_direct(self, out: np.ndarray) -> None:
        """The whole dataset into ``out`` (of its shape and type)."""
        import h5py

        self.id.read(h5py.h5s.ALL, h5py.h5s.ALL, out)


def _dataset(group: h5py.Group, name: str) -> _Stored | None:
    """``group``'s dataset ``name`` (followed through links); None where it has none, or not a dataset."""
    import h5py

    try:
        oid = h5py.h5o.open(group.id, name.encode())
    except KeyError:
        return None
    return _Stored(oid) if isinstance(oid, h5py.h5d.DatasetID) else None


def _unit(ds: _Stored, table: dict, default: str, where: str, what: str) -> float | None:
    """The factor from ``ds``'s ``unit`` (absent: ``default``) to MDAnalysis's units; None for an unknown unit."""
    unit = ds.attrs.get("unit", default)
    if isinstance(unit, bytes | np.bytes_):
        unit = unit.decode("utf-8", "replace")
    factor = table.get(str(unit).strip().lower().replace(" ", ""))
    if factor is None:
        log.warning("%s: %s has unit %r, which trajscale does not read", where, what, unit)
    return factor


def _field_at(ds: _Stored, shape: tuple[int, int, int], file_size: int, where: str, what: str,
              scale: float) -> FieldAt:
    """Where ``ds`` (which must be ``shape``, contiguous, unfiltered numbers, inside the file) lies."""
    if ds.shape != shape:
        raise InputFileError(where, f"{what} has shape {ds.shape}, expected {shape}: the file is damaged")
    if ds.dtype.kind != "f" or ds.dtype.itemsize not in (4, 8):
        raise InputFileError(where, f"{what} holds {ds.dtype}, not floating-point coordinates")
    if ds.chunks is not None or ds.n_filters or ds.is_virtual or ds.external:
        raise InputFileError(where, f"{what} is chunked or compressed; mdCATH stores it contiguous and "
                                    "uncompressed (read it through h5py, or rewrite it so)")
    offset = ds.id.get_offset() if ds.size else 0
    if offset is None:
        raise InputFileError(where, f"{what} was never written")
    end = offset + ds.size * ds.dtype.itemsize
    if end > file_size:
        raise InputFileError(where, f"{what} ends at byte {end} but the file has {file_size} bytes: "
                                    "it is truncated")
    return FieldAt(int(offset), ds.dtype.str, float(scale))


def _box(group: h5py.Group, where: str) -> tuple[float, ...] | None:
    """The member's box as MDAnalysis dimensions (a diagonal 3x3 matrix in nm; older: 3 edges), None without one."""
    ds = _dataset(group, "box")
    if ds is None:
        return None
    if ds.shape not in ((3, 3), (3,)) or ds.dtype.kind not in "fi":
        raise InputFileError(where, f"box has shape {ds.shape} and dtype {ds.dtype}; mdCATH's is a 3x3 matrix")
    scale = _unit(ds, _LENGTH_UNITS, "nm" if ds.shape == (3, 3) else "Angstrom", where, "box")
    if scale is None:
        return None
    raw = np.empty(ds.shape, ds.dtype)
    ds.read_direct(raw)   # (a whole small dataset: no selection made)
    edges = raw.astype(np.float64) * scale
    if not np.isfinite(edges).all() or not (edges.any()):
        return None
    diagonal = np.diagonal(edges) if edges.ndim == 2 else None
    if diagonal is not None and diagonal.all() and not (edges - np.diag(diagonal)).any():
        edges = np.abs(diagonal)   # (a diagonal matrix, mdCATH's: its edges, at right angles)
    if edges.ndim == 1:
        return (*(float(np.float32(v)) for v in edges), 90.0, 90.0, 90.0)
    from ..box import edges_to_dimensions

    dims = edges_to_dimensions(edges[None])[0]
    return tuple(float(v) for v in dims)


def describe(f: h5py.File, where: str, key: str | None, file_size: int, identity: tuple,
             domain: Domain | None = None) -> MemberLayout:
    """Check member ``key`` of the open mdCATH file ``f`` (None: its only one) and say where its data lie."""

    domain = Domain.of(f, where) if domain is None else domain
    keys = domain.keys
    if key is None:
        if len(keys) != 1:
            shown = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
            raise InputFileError(where, f"holds {len(keys)} trajectories (temperature/replica: {shown or 'none'}); "
                                        f"name one, e.g. {member_location(where, keys[0] if keys else '348/0')}")
        key = keys[0]
    if key not in keys:
        raise InputFileError(where, f"has no member {key!r} (it has {', '.join(keys) or 'none'})")
    at = f"{where}{MEMBER_SEP}{key}"
    member = domain.group[key]
    coords = _dataset(member, "coords")
    if coords is None:
        names = sorted(member)
        held = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "") or "nothing"
        raise InputFileError(at, f"holds no coords dataset (it holds {held}): the file is damaged")
    if coords.ndim != 3 or coords.shape[2] != 3:
        raise InputFileError(at, f"coords has shape {coords.shape}, not (frames, atoms, 3)")
    n_frames, n_atoms = int(coords.shape[0]), int(coords.shape[1])
    declared = member.attrs.get("numFrames")
    if declared is not None and int(np.asarray(declared).reshape(-1)[0]) != n_frames:
        raise InputFileError(at, f"numFrames says {int(np.asarray(declared).reshape(-1)[0])} but coords holds "
                                 f"{n_frames} frames: the file is damaged")
    if domain.z_shape is not None and domain.z_shape != (n_atoms,):
        raise InputFileError(at, f"z has {domain.z_shape} atoms but coords {n_atoms}: the file is damaged")
    shape = (n_frames, n_atoms, 3)
    scale = _unit(coords, _LENGTH_UNITS, "Angstrom", at, "coords")
    if scale is None:
        raise InputFileError(at, f"coords has unit {coords.attrs.get('unit')!r}; trajscale reads Å or nm")
    layout_coords = _field_at(coords, shape, file_size, at, "coords", scale)
    forces = _dataset(member, "forces")
    layout_forces = None
    if forces is not None:
        fscale = _unit(forces, _FORCE_UNITS, "kcal/mol/Angstrom", at, "forces")
        if fscale is not None:
            layout_forces = _field_at(forces, shape, file_size, at, "forces", fscale)
    return MemberLayout(domain.name, n_frames, n_atoms, layout_coords, layout_forces, _box(member, at),
                        tuple(identity))


def check_offsets(f: h5py.File, store: ByteStore, where: str, layout: MemberLayout, key: str) -> None:
    """The layout's offsets must give HDF5's own values (the last frame's first atoms, read both ways)."""
    if not layout.n_frames or not layout.n_atoms:
        return
    ds = f[layout.domain][key]["coords"]
    width = min(layout.n_atoms, 64)
    theirs = np.asarray(ds[layout.n_frames - 1, :width], np.float32) * np.float32(layout.coords.scale)
    dtype = np.dtype(layout.coords.dtype)
    at = layout.coords.offset + (layout.n_frames - 1) * layout.n_atoms * 3 * dtype.itemsize
    mine = np.frombuffer(store.read_ranges([(at, at + width * 3 * dtype.itemsize)])[0], dtype)
    if (mine.astype(np.float32) * np.float32(layout.coords.scale)).tobytes() != theirs.reshape(-1).tobytes():
        raise InputFileError(where, f"member {key}: coords' stored bytes do not give HDF5's values: the file is "
                                    "damaged")


class _HeadFile(ReadOnlyFile):
    """An object's first bytes as a file for h5py (most layouts told without a request); ``beyond``: HDF5 asked more.
    With ``store``, a file cut short read on to the ``size`` its superblock records, zeros past its end."""

    def __init__(self, head: bytes, size: int, store: ByteStore | None = None) -> None:
        super().__init__()
        self._head, self._size, self._store, self.beyond = head, size, store, False

    def end(self) -> int:
        return self._size

    def readinto(self, buf) -> int:
        view = memoryview(buf).cast("B")
        stop = min(self._size, self._pos + len(view))
        n = max(0, stop - self._pos)
        if stop <= len(self._head):
            view[:n] = self._head[self._pos:stop]
        elif self._store is None:
            self.beyond = True
            raise OSError("past the object's first bytes")
        else:
            held = min(stop, self._store.size)
            data = self._store.read_ranges([(self._pos, held)])[0] if self._pos < held else b""
            view[:len(data)] = data
            view[len(data):n] = bytes(n - len(data))
        self._pos += n
        return n


#: The first bytes a file is told from (an object's come with its first request: no request more).
HEAD = 64 * 1024


def looks_like(store: ByteStore) -> bool:
    """Whether ``store`` holds an mdCATH file: from its first bytes where they hold the root, else HDF5's view."""
    import h5py

    head = store.first_bytes(HEAD)
    if head[:8] != HDF5_MAGIC:
        return False
    # (a file cut short is told by its layout too, where the cut spared it: HDF5 is shown the size its
    # superblock records)
    recorded = max(store.size, superblock_end(head) or 0)
    fh = _HeadFile(head, recorded)
    try:
        with h5py.File(fh, "r") as f:
            return looks_like_mdcath(f)
    except Exception:   # noqa: BLE001 - HDF5 asked past the first bytes, or cannot read them
        if not fh.beyond:
            return False
    if recorded > store.size:
        try:
            with h5py.File(_HeadFile(head, recorded, store), "r") as f:
                return looks_like_mdcath(f)
        except Exception:   # noqa: BLE001 - the cut took the layout: not ours to say why
            return False
    try:
        with hdf5_of(store) as f:
            return looks_like_mdcath(f)
    except Exception:   # noqa: BLE001 - not readable as HDF5: not ours to say why
        return False


class hdf5_of:
    """``with hdf5_of(store, prepares) as f``: HDF5's view of ``store``'s file (``prepares``: metadata kept)."""

    def __init__(self, store: ByteStore, prepares: bool = True) -> None:
        from ..hdf5.files import FileRequest, file_of

        try:
            self.opened = file_of(store, FileRequest(shipped=None if prepares else {}))
        except CutShortError as exc:   # (as of any HDF5 file: `trajscale repair` mends H5MD files, not these)
            raise InputFileError(exc.path, exc.cut) from None
        self.f = self.opened.file

    def __enter__(self) -> h5py.File:
        return self.f

    def __exit__(self, *exc) -> None:
        try:
            self.opened.keep_metadata()   # (the next open of this object starts from the metadata read now)
        except OSError:
            pass
        finally:
            self.f.close()


def _file_of(where: Location) -> tuple[Location, str]:
    """The file ``where`` names (a member's ``#T/R`` left out; its options kept), and its path."""
    path, _ = split_member(where.where)
    return where.at(path), path


def members(location: str | os.PathLike | Location) -> list[tuple[str, dict]]:
    """``[(member key, {"domain", "temperature", "replica"}), ...]`` of an mdCATH file, in numeric order."""
    file, path = _file_of(Location.of(location))
    with closing(file.store()) as store, hdf5_of(store) as f:
        domain, group = domain_group(f, path)
        return [(k, member_labels(domain, k)) for k in member_keys(group)]


def read_text(f: h5py.File, where: str, name: str = "pdbProteinAtoms") -> str:
    import h5py

    domain, group = domain_group(f, where)
    ds = group.get(name)
    if not isinstance(ds, h5py.Dataset) or ds.dtype.kind not in "SOU" and ds.dtype != np.dtype("V"):
        raise InputFileError(where, f"has no {name} text in /{domain}")
    raw = ds[()]
    if isinstance(raw, np.ndarray):
        raw = b"".join(x if isinstance(x, bytes) else str(x).encode() for x in raw.reshape(-1))
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes | np.bytes_) else str(raw)


def pdb_text(location: str | os.PathLike | Location) -> str:
    """The protein's PDB text (``pdbProteinAtoms``) of an mdCATH file: its topology."""
    file, path = _file_of(Location.of(location))
    with closing(file.store()) as store, hdf5_of(store) as f:
        return read_text(f, path)


def universe(location: str | os.PathLike | Location):
    """An MDAnalysis Universe of the file's protein from its ``pdbProteinAtoms`` (every member's atoms, in order)."""
    file, path = _file_of(Location.of(location))
    with closing(file.store()) as store:
        return universe_of(store, path)


def universe_of(store: ByteStore, path: str, prepares: bool = True):
    """:func:`universe` of the file in ``store``, parsed once per file version (25 members share one topology)."""
    key = tuple(store.identity)
    u = _UNIVERSES.get(key)
    if u is None:
        with hdf5_of(store, prepares) as f:
            u = parse_universe(read_text(f, path), path)
        _UNIVERSES.put(key, u)
    return u


def parse_universe(text: str, path: str):
    """An MDAnalysis Universe of ``pdbProteinAtoms`` ``text`` (of the file at ``path``)."""
    import warnings

    import MDAnalysis as mda
    from MDAnalysis.lib.util import NamedStream

    name = os.path.basename(path.rstrip("/")).rsplit(".", 1)[0] or "mdcath"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            u = mda.Universe(NamedStream(io.StringIO(text), f"{name}.pdb"))
    except Exception as exc:   # noqa: BLE001 - any parser failure is the file's text's
        raise InputFileError(path, f"pdbProteinAtoms cannot be read as PDB: {' '.join(str(exc).split())}") from None
    u.filename = path
    return u


#: Topologies parsed in this process, by their file's store identity: the last few.
UNIVERSES_KEPT = 8
_UNIVERSES = LRU(UNIVERSES_KEPT)


__all__ = ["FRAME_PS", "HEAD", "KCAL_TO_KJ", "MEMBER_SEP", "FieldAt", "Domain", "MemberLayout", "check_offsets",
           "describe", "domain_group", "hdf5_of", "looks_like", "looks_like_mdcath", "member_keys", "member_labels",
           "member_location", "members", "parse_universe", "pdb_text", "read_text", "split_member", "universe",
           "universe_of"]
