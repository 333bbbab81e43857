"""mdCATH's per-domain HDF5 files: each (temperature, replica) a trajectory of its own, read-only.

mdCATH (Mirarchi et al., Sci Data 2024) keeps one file per CATH domain: ``/{domain}`` holds the atoms and the
``pdbProteinAtoms`` text; ``/{domain}/{temperature}/{replica}`` holds ``coords`` (frames x atoms x 3, float32, Å,
contiguous), ``forces`` (kcal/mol/Å), ``box`` (nm) and ``numFrames``. A member is named ``"{temperature}/{replica}"``
(``member=`` or ``mdcath_dataset_1abcA00.h5#348/0``).

The opening process reads the HDF5 metadata once, checks every field it uses, and records where coordinates and
forces lie (:class:`MemberLayout`) with the store's identity; workers read frames at those offsets without
opening HDF5. Frame ``i`` is at ``(i + 1) * 1000`` ps, step ``i + 1``, as mdCATH's ``convert_mdCATH.py`` numbers
them; forces come in MDAnalysis's kJ/(mol Å).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputFileError
from ..facts import LayoutFacts
from ..hdf5.runs import plan_atom_reads
from ..sources.base import OpenRequest, Source, store_for
from ..storage.bytestore import ByteStore
from ..storage.location import Location
from ..util import HDF5_MAGIC
from . import kept
from .layout import (
    FRAME_PS,
    Domain,
    FieldAt,
    MemberLayout,
    check_offsets,
    describe,
    hdf5_of,
    looks_like,
    looks_like_mdcath,
    member_labels,
    member_location,
    members,
    split_member,
    universe,
    universe_of,
)
from .traits import MDCATH

if TYPE_CHECKING:   # (h5py is imported where a file's HDF5 is read: a described file needs none)
    import h5py

log = logging.getLogger(__name__)


def ensemble_members(where: Location, base):
    """The members an mdCATH file holds, one per temperature and replica (named ``{base}/{T}/{replica}``,
    labelled ``domain``, ``temperature``, ``replica``), each with its checked Source config; None: not mdCATH."""
    import dataclasses

    path, only = split_member(where.where)
    store = where.at(path).store()
    try:
        file = kept.file_key(store) if only is None else None
        described = _described(kept.load(file, "members"))
        if described is not None:   # (an earlier run described this very file: no HDF5 this time)
            domain, layouts = described
        else:
            try:
                is_mdcath, view = _told(store)
            except InputFileError:   # (unreadable now, as a Hub file offline that the cache lacks: refused when opened)
                is_mdcath, view = True, None
            if not is_mdcath:
                return None
            try:
                with view if view is not None else hdf5_of(store) as f:
                    domain, layouts = _layouts(f, store, path, only)
            except (InputFileError, *_DAMAGE) as exc:   # the file itself is damaged: one member, refused when opened
                log.debug("%s: %s", path, exc)
                domain, layouts = None, [(only, None)]
            if domain is not None:
                kept.store(file, "members", {"domain": domain, "members": [
                    [key, None if layout is None else layout.to_dict()] for key, layout in layouts]})
        shipped = store.state() or {}
    finally:
        store.close()
    stem = base.name[len("mdcath_dataset_"):] if base.name.startswith("mdcath_dataset_") else base.name
    out = []
    for key, layout in layouts:
        # a damaged member goes without its layout: its Source's check then refuses this member alone
        source = {"kind": MDCATHSource.kind, "path": path, "member": key, **shipped}
        if layout is not None:
            source["layout"] = layout.to_dict()
        labels = {**base.labels, **(member_labels(domain, key) if domain is not None and key is not None else {})}
        out.append(dataclasses.replace(base, name=f"{stem}/{key}" if key is not None else stem,
                                       trajectory=(member_location(path, key) if key is not None else path,),
                                       topology=None, labels=labels, source=source))
    return out


def _described(entry: dict | None) -> tuple[str, list[tuple[str, MemberLayout | None]]] | None:
    """The domain and members' layouts a cache entry kept (:mod:`.kept`); None for none, or a damaged one."""
    if entry is None:
        return None
    try:
        return str(entry["domain"]), [(str(key), None if d is None else MemberLayout.from_dict(d))
                                      for key, d in entry["members"]]
    except (KeyError, TypeError, ValueError) as exc:   # a damaged entry is only a miss
        log.debug("ignoring a cached mdCATH description: %s", exc)
        return None


#: What h5py raises on a damaged file's metadata.
_DAMAGE = (KeyError, OSError, RuntimeError, ValueError, TypeError)


def _told(store: ByteStore) -> tuple[bool, hdf5_of | None]:
    """Whether the file in ``store`` is mdCATH's, and HDF5's view of it where one told it (else :func:`looks_like`)."""
    if not store.costs_request and store.first_bytes(len(HDF5_MAGIC)) == HDF5_MAGIC:
        try:
            view = hdf5_of(store)
        except Exception:   # noqa: BLE001 - not readable as HDF5 whole: its first bytes say
            view = None
        if view is not None:
            try:
                if looks_like_mdcath(view.f):
                    return True, view
                told = True
            except Exception:   # noqa: BLE001 - damaged metadata: its first bytes say
                told = False
            view.__exit__(None, None, None)
            if told:
                return False, None
    return looks_like(store), None


def _layouts(f: h5py.File, store: ByteStore, path: str,
             only: str | None) -> tuple[str, list[tuple[str, MemberLayout | None]]]:
    """The domain's name and every member's layout (or ``only``'s), checked (None for one that fails a check)."""
    domain = Domain.of(f, path)
    identity = tuple(store.identity)
    out: list[tuple[str, MemberLayout | None]] = []
    checked = False
    for key in [only] if only is not None else domain.keys:
        try:
            layout = describe(f, path, key, store.size, identity, domain)
            if not checked and not store.costs_request:
                check_offsets(f, store, path, layout, key)
                checked = True
        except (InputFileError, *_DAMAGE) as exc:
            log.debug("%s member %s: %s", path, key, exc)
            layout = None
        out.append((key, layout))
    return domain.name, out


class MDCATHSource(Source):
    """One member (temperature, replica) of an mdCATH file, read at the byte offsets of its contiguous data.

    Parameters
    ----------
    path
        The file, or its URL (``s3://``, ``http(s)://``); ``path#T/R`` names the member too.
    member
        ``"{temperature}/{replica}"`` (None: the one ``path`` names, or the file's only member).
    storage_options
        A config's: the options of the store of the process that described it (a Location brings its own).
    layout
        What the first process found (:class:`MemberLayout` as a dict): HDF5 is not opened, and the file must
        still be the one described.
    round_trip, identity
        For a URL: what the first process saw; the object is then opened without a request.
    """

    traits = MDCATH

    def __init__(self, path: str | Location, member: str | None = None, storage_options: dict | None = None,
                 layout: dict | None = None, round_trip: float | None = None, identity: list | None = None) -> None:
        where = Location.of(path, storage_options)
        path, named = split_member(where.where)
        self._path = path
        self._reads: dict = {}
        self.bytes_read = 0
        key = member or named
        #: True when this process described the file (else a worker's, opened from the config)
        self._prepares = layout is None
        self._store = where.at(path).store(identity, round_trip)
        try:
            if layout is None:
                self._layout = self._describe(key)
            else:
                self._layout = MemberLayout.from_dict(layout)
                if tuple(self._store.identity) != tuple(self._layout.identity):
                    raise InputFileError(path, "changed since it was first opened (its size, modification time, "
                                               "inode or ETag); open it again")
        except BaseException:
            self._store.close()
            raise
        self._key = key or self._first_key

    _first_key: str | None = None
    _whole = None
    #: False for a member opened on a store its file's other members share (:meth:`on_store`)
    _owns_store = True

    @classmethod
    def on_store(cls, store: ByteStore, path: str, member: str, layout: MemberLayout) -> MDCATHSource:
        """Member ``member`` read at ``layout``'s offsets through the file's shared ``store`` (the caller's)."""
        if tuple(store.identity) != tuple(layout.identity):
            raise InputFileError(path, "changed since it was first opened (its size, modification time, inode or "
                                       "ETag); open it again")
        self = cls.__new__(cls)
        self._path, self._reads, self.bytes_read, self._key = path, {}, 0, member
        self._prepares, self._store, self._owns_store, self._layout = False, store, False, layout
        return self

    @classmethod
    def shared_file(cls, store: ByteStore, path: str, described_here: bool) -> MembersOnStore:
        return MembersOnStore(store, path, described_here)

    @classmethod
    def member_layout(cls, config: dict) -> MemberLayout:
        return MemberLayout.from_dict(config["layout"])

    @classmethod
    def member_bytes(cls, config: dict) -> int:
        """The member's coordinates' bytes, from its config's layout (0 without one: checked again when opened)."""
        if not config.get("layout"):
            return 0
        try:
            at = config["layout"]   # (its numbers read as they are: no layout made per member)
            return int(at["n_frames"]) * int(at["n_atoms"]) * 3 * np.dtype(at["coords"]["dtype"]).itemsize
        except (KeyError, TypeError, ValueError):   # (a config not of this version: weighed as not known)
            return 0

    @classmethod
    def node_copy_config(cls, config: dict, copy_path: str) -> dict:
        """The member on the node's copy, described anew there (its own offsets check, inode and time)."""
        return {"kind": cls.kind, "path": copy_path, "member": config["member"]}

    def _describe(self, key: str | None) -> MemberLayout:
        """Open the file's HDF5 metadata, check the member, and keep where its data lie."""
        with hdf5_of(self._store) as f:
            try:
                domain = Domain.of(f, self._path)
                layout = describe(f, self._path, key, self._store.size, tuple(self._store.identity), domain)
                if key is None:
                    self._first_key = domain.keys[0]
            except (KeyError, OSError, RuntimeError, ValueError, TypeError) as exc:   # HDF5 met damage
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise InputFileError(self._path, f"cannot be read as mdCATH ({why}): the file is damaged") from None
            if not self._store.costs_request:   # (where each read is a request: one more)
                check_offsets(f, self._store, self._path, layout, key or self._first_key)
        return layout

    @classmethod
    def guess_format(cls, path: str, store=None) -> str | None:
        """HDF5 whose root holds one group with a ``pdbProteinAtoms`` text (told from the first bytes where it can)."""
        path, _ = split_member(path)
        try:   # (the registry's store is read, not opened again; a member's path has none)
            with store_for(path, store) as bytes_of:
                return "MDCATH" if looks_like(bytes_of) else None
        except Exception:   # noqa: BLE001 - a file that cannot be opened or read is not recognised here
            return None

    @classmethod
    def open(cls, location: Location, request: OpenRequest) -> MDCATHSource:
        return cls(location)

    @property
    def path(self) -> str:
        return self._path

    @property
    def member(self) -> str:
        """The member's key, ``"{temperature}/{replica}"``."""
        return self._key

    @property
    def labels(self) -> dict:
        """``{"domain", "temperature", "replica"}`` of this member."""
        return member_labels(self._layout.domain, self._key)

    @property
    def universe(self):
        """The member's topology: its file's ``pdbProteinAtoms`` as an MDAnalysis Universe (parsed once, then kept)."""
        if getattr(self, "_universe", None) is None:
            self._universe = universe_of(self._store, self._path, self._prepares)
        return self._universe

    def own_universe(self):
        """The member's atoms from its own file (:func:`~.atoms.labelled_topology`): no topology file, no MDAnalysis."""
        from .atoms import labelled_topology

        return labelled_topology(self._store, self._path, self._layout.n_atoms, self._prepares)

    @property
    def n_frames(self) -> int:
        return self._layout.n_frames

    @property
    def n_atoms(self) -> int:
        return self._layout.n_atoms

    @property
    def fields(self) -> tuple[str, ...]:
        return ("position",) if self._layout.forces is None else ("position", "force")

    @property
    def native_units(self) -> dict[str, str]:
        return {"length": "Angstrom", "time": "ps"}

    def get_config(self) -> dict:
        # (with what opens the store again without a request: an object's options, identity and round trip)
        return {"kind": self.kind, "path": self._path, "member": self._key, "layout": self._layout.to_dict(),
                **(self._store.state() or {})}

    def layout_summary(self) -> LayoutFacts:
        return LayoutFacts(format="MDCATH", path=member_location(self._path, self._key), n_frames=self.n_frames,
                           n_atoms=self.n_atoms, fields=self.fields)

    def remote_stats(self) -> dict | None:
        return self._store.fetched()

    @property
    def store(self):
        """The file's bytes: what the frames are read from."""
        return self._store

    @property
    def reads_ahead(self) -> bool:
        """True where the bytes are fetched (not a file at hand): the next block's are asked for ahead."""
        return self._store.costs_request

    def read(self, start: int, stop: int, atoms: np.ndarray | None = None,
             fields: tuple[str, ...] = ("position",), stride: int = 1):
        return self._read_rows(start, stop, atoms, fields, stride)

    def read_into(self, start: int, stop: int, atoms: np.ndarray | None, stride: int,
                  out: dict[str, np.ndarray], box: np.ndarray, time: np.ndarray, step: np.ndarray) -> None:
        """The frames' selected atoms at their byte offsets into the rows; box, time and step from the layout."""
        n = len(range(start, stop, stride))
        frames = np.arange(start, stop, stride, dtype=np.int64)
        step[:] = frames + 1
        time[:] = (frames + 1) * FRAME_PS
        if self._layout.box is not None:
            box[:] = np.asarray(self._layout.box, np.float32)
        if not n:
            return
        if atoms is None:   # (every atom: the same plan for every read, made once)
            plan = self._whole or self.__dict__.setdefault("_whole", plan_atom_reads(None, self.n_atoms))
        else:
            plan = plan_atom_reads(np.asarray(atoms, np.int64), self.n_atoms)
        for fl, arr in out.items():
            at = self._layout.coords if fl == "position" else self._layout.forces
            if not arr.shape[1]:
                continue
            self._read_field(at, fl, plan, start, stride, arr)
            if at.scale != 1.0:
                arr *= np.float32(at.scale)
            self.bytes_read += n * plan.n_columns * 3 * np.dtype(at.dtype).itemsize

    def read_frames_into(self, frames: np.ndarray, out: dict[str, np.ndarray], time: np.ndarray) -> bool:
        """Every atom of ``frames`` at their offsets, one compiled read per field; False without a descriptor."""
        frames = np.asarray(frames, np.int64)
        for fl, arr in out.items():
            at = self._layout.coords if fl == "position" else self._layout.forces
            if not self._chunk_reads(fl, at).read_frames(frames, arr):
                return False
            if at.scale != 1.0:
                arr *= np.float32(at.scale)
            self.bytes_read += arr.nbytes   # (only native float32 is read so)
        time[:] = (frames + 1) * FRAME_PS
        return True

    def _read_field(self, at: FieldAt, fl: str, plan, start: int, stride: int, out: np.ndarray) -> None:
        reads = self._chunk_reads(fl, at)
        # (one call where the store gathers them, a local descriptor; else the runs, then the columns)
        if reads.read(start, len(out), stride, plan.runs, plan.index, out):
            return
        if plan.index is None:
            ok = reads.read_runs(plan.runs, out, start, stride)
        else:
            buf = np.empty((len(out), plan.n_columns, 3), np.float32)
            ok = reads.read_runs(plan.runs, buf, start, stride)
            np.take(buf, plan.index, axis=1, out=out, mode="clip")
        if not ok:
            raise InputFileError(self._path, f"member {self._key}: {fl}s cannot be read whole at their offsets: "
                                             "the file is truncated or damaged")

    def _chunk_reads(self, fl: str, at: FieldAt):
        reads = self._reads.get(fl)
        if reads is None:
            from ..hdf5.chunks import ChunkIndex, ChunkReads

            dtype = np.dtype(at.dtype)
            index = ChunkIndex((self.n_frames, self.n_atoms, 3), None, dtype.str, False, (at.offset,),
                               (self.n_frames * self.n_atoms * 3 * dtype.itemsize,), (0,))
            reads = self._reads[fl] = ChunkReads(self._store, index)
        return reads

    def prefetch(self, start: int, stop: int, atoms: np.ndarray | None = None,
                 fields: tuple[str, ...] = ("position",), stride: int = 1) -> None:
        """Start fetching the bytes the next read with these arguments takes (where the store reads ahead)."""
        if not self.reads_ahead or not 0 <= start < stop <= self.n_frames or any(f not in self.fields for f in fields):
            return
        if atoms is not None:
            atoms = np.asarray(atoms, np.int64)
            if atoms.size and (atoms.min() < 0 or atoms.max() >= self.n_atoms):
                return
        plan = plan_atom_reads(atoms, self.n_atoms)
        for fl in fields:
            at = self._layout.coords if fl == "position" else self._layout.forces
            self._chunk_reads(fl, at).prefetch(plan.runs, start, stride, len(range(start, stop, stride)))

    def atomic_numbers(self) -> np.ndarray:
        """The atoms' atomic numbers (the domain's ``z``), int64."""
        with hdf5_of(self._store, self._prepares) as f:
            return self._z(f)

    def _z(self, f: h5py.File) -> np.ndarray:
        import h5py

        ds = f[self._layout.domain].get("z")
        if not isinstance(ds, h5py.Dataset) or ds.shape != (self.n_atoms,) or ds.dtype.kind not in "iu":
            raise InputFileError(self._path, f"has no atomic numbers z for its {self.n_atoms} atoms")
        return np.asarray(ds[()], np.int64)

    def close(self) -> None:
        for reads in self._reads.values():
            reads.close()
        self._reads = {}
        if not self._owns_store:
            return
        forget = getattr(self._store, "forget_ahead", None)   # (requests started ahead, not asked for)
        if forget is not None:
            forget()
        self._store.close()


class MembersOnStore:
    """One mdCATH file's members read through its one store (the caller's), at their layouts or described anew."""

    def __init__(self, store: ByteStore, path: str, described_here: bool) -> None:
        self._store, self.path, self._described_here = store, path, described_here
        self._hdf5 = None   # (the copy's HDF5 view and its domain, opened by its first member described)

    def member(self, config: dict, layout: MemberLayout | None) -> MDCATHSource:
        key = config["member"]
        if self._described_here or layout is None:
            layout = self._described(key)
        return MDCATHSource.on_store(self._store, self.path, key, layout)

    def _described(self, key: str) -> MemberLayout:
        where = self.path
        if self._hdf5 is None:
            view = hdf5_of(self._store)
            try:
                self._hdf5 = (view, Domain.of(view.f, where))
            except BaseException:
                view.f.close()
                raise
        view, domain = self._hdf5
        try:
            layout = describe(view.f, where, key, self._store.size, tuple(self._store.identity), domain)
            check_offsets(view.f, self._store, where, layout, key)
        except (KeyError, OSError, RuntimeError, ValueError, TypeError) as exc:   # HDF5 met damage
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputFileError(where, f"cannot be read as mdCATH ({why}): the file is damaged") from None
        return layout

    def close(self) -> None:
        if self._hdf5 is not None:
            self._hdf5[0].f.close()
            self._hdf5 = None

__all__ = ["FRAME_PS", "FieldAt", "MDCATHSource", "MemberLayout", "MembersOnStore", "describe",
           "ensemble_members", "looks_like_mdcath", "member_location", "members", "split_member",
           "universe"]
