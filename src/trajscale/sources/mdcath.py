"""mdCATH's per-domain HDF5 files: each (temperature, replica) a trajectory of its own, read-only.

mdCATH (Mirarchi et al., Sci Data 2024; the builder in compsciencelab/mdCATH) keeps one file
``mdcath_dataset_{domain}.h5`` per CATH domain. Its root holds one group, ``/{domain}``, with the
protein's atoms (``chain``, ``element``, ``resid``, ``resname``, ``z``) and three texts (``pdb`` and
``psf`` of the whole simulated system, ``pdbProteinAtoms`` of the protein alone); under it,
``/{domain}/{temperature}/{replica}`` (320, 348, 379, 413, 450 K; replicas 0-4) holds ``coords``
(frames x atoms x 3, float32, Å, contiguous and uncompressed), ``forces`` (kcal/mol/Å), ``box`` (the
first frame's box, a diagonal 3x3 matrix in nm), ``rmsd``, ``rmsf``, ``gyrationRadius``, ``dssp`` and
the attribute ``numFrames``.

A member (one temperature and replica) is named by its key ``"{temperature}/{replica}"``: given as
``member=`` or after the file's name, ``mdcath_dataset_1abcA00.h5#348/0``. A file is recognised by its
own bytes (HDF5 whose root holds one group with a ``pdbProteinAtoms`` text); the topology is that
text (:func:`universe`), and :func:`members` lists a file's members with their labels (domain,
temperature, replica).

The process that opens a member first reads its HDF5 metadata (h5py, locally or through the caching
file object for a URL: :mod:`trajscale.h5md.metadata`), checks every field it will use (shapes, frame
count against ``numFrames``, dtypes, units, that the data lies inside the file) and records where the
coordinates and forces lie (:class:`MemberLayout`). That record travels in the config: a worker reads
frames at those byte offsets (``pread`` and the compiled gather locally, coalesced range requests for
a URL, :class:`~trajscale.h5md.chunks.ChunkReads`) without opening HDF5 at all, after checking that the
file (its size, modification time and inode; an object's ETag and size) is the one described.

Frames are 1 ns apart: frame ``i`` is at ``(i + 1) * 1000`` ps with step ``i + 1``, as mdCATH's own
conversion utilities (``convert_mdCATH.py``) number them. Forces come in MDAnalysis's kJ/(mol Å).
"""

from __future__ import annotations

import logging
import os
from types import MappingProxyType

import h5py
import numpy as np

from ..errors import InputFileError
from ..facts import LayoutFacts
from ..h5md.runs import plan_atom_reads
from ..storage import is_url
from ..util import HDF5_MAGIC
from .base import OpenRequest, Source, file_head
from .mdcath_layout import (
    FRAME_PS,
    MEMBER_SEP,
    FieldAt,
    MemberLayout,
    check_offsets,
    describe,
    domain_group,
    local_identity,
    looks_like_mdcath,
    member_keys,
    member_labels,
    member_location,
    members,
    open_local,
    open_remote,
    pdb_text,
    split_member,
    universe,
    url_looks_like_mdcath,
)

log = logging.getLogger(__name__)

_NATIVE_F32 = np.dtype("float32").newbyteorder("=")


def ensemble_members(location: str, base):
    """The members an mdCATH file holds, for an ensemble (the expansion hook of
    :data:`trajscale.ensemble.EXPANDERS`): one :class:`~trajscale.ensemble.Member` per temperature and
    replica, named ``{base's name}/{temperature}/{replica}`` (the file name's ``mdcath_dataset_`` left out),
    labelled ``base.labels`` and ``domain``, ``temperature``, ``replica``, with the Source config that reads
    it (checked now, with its data's byte offsets: workers open no HDF5). None when the file is not
    mdCATH's (it is then read as one trajectory, as usual).

    The topology is the file's own ``pdbProteinAtoms`` (:func:`universe`): the members carry none.
    """
    import dataclasses

    path, only = split_member(location)
    storage_options = getattr(base, "storage_options", None)
    if is_url(path):
        if MDCATHSource.guess_format(path) is None:
            return None
        with open_remote(path, storage_options) as (obj, _, f):
            layouts = _layouts(f, path, only, obj.size, obj.object_identity.to_list())
            extra = {k: v for k, v in obj.state().items() if k in ("storage_options", "round_trip")}
    else:
        if file_head(path, len(HDF5_MAGIC)) != HDF5_MAGIC:
            return None
        with open_local(path) as f:
            if not looks_like_mdcath(f):
                return None
            identity = local_identity(path)
            layouts = _layouts(f, path, only, identity[0], identity, local=True)
        extra = {}
    stem = base.name[len("mdcath_dataset_"):] if base.name.startswith("mdcath_dataset_") else base.name
    out = []
    for key, layout in layouts:
        source = {"kind": MDCATHSource.kind, "path": path, "member": key, "layout": layout.to_dict(), **extra}
        out.append(dataclasses.replace(base, name=f"{stem}/{key}", trajectory=(member_location(path, key),),
                                       topology=None, labels={**base.labels, **member_labels(layout.domain, key)},
                                       source=source))
    return out


def _layouts(f: h5py.File, path: str, only: str | None, size: int, identity,
             local: bool = False) -> list[tuple[str, MemberLayout]]:
    """Every member's layout (or ``only``'s), checked; a local file's offsets checked against HDF5's reads."""
    _, group = domain_group(f, path)
    keys = member_keys(group)
    out = []
    for key in [only] if only is not None else keys:
        layout = describe(f, path, key, size, identity, keys)
        if local:
            check_offsets(f, path, layout, key)
        out.append((key, layout))
    return out


# ----------------------------------------------------------------------------- the Source

class MDCATHSource(Source):
    """One member (temperature, replica) of an mdCATH file, read at the byte offsets of its contiguous data.

    Parameters
    ----------
    path
        The file, or its URL (``s3://``, ``http(s)://``); ``path#T/R`` names the member too.
    member
        ``"{temperature}/{replica}"`` (None: the one ``path`` names, or the file's only member).
    storage_options
        For a URL: the object store's options (None: the run's).
    layout
        What the first process found (:class:`MemberLayout` as a dict): given, HDF5 is not opened.
    round_trip
        For a URL: the shortest round trip the first process saw.
    """

    kind = "mdcath"
    formats = ("MDCATH",)
    suffixes = MappingProxyType({})
    description = ("mdCATH per-domain HDF5 (read-only): each temperature/replica a trajectory, "
                   "file.h5#348/0; the topology from its pdbProteinAtoms")
    supports_slab_reads = True
    reads_urls = True
    fills_rows = True

    def __init__(self, path: str, member: str | None = None, storage_options: dict | None = None,
                 layout: dict | None = None, round_trip: float | None = None) -> None:
        path, named = split_member(str(path))
        self._path, self._remote, self._fd = path, None, -1
        self._reads: dict = {}
        self.bytes_read = 0
        self._storage_options = storage_options
        key = member or named
        if is_url(path):
            from ..storage import current_options

            self._storage_options = dict(storage_options) if storage_options is not None else \
                (current_options() or None)
        if layout is None:
            self._layout = self._describe(key)
        else:
            self._layout = MemberLayout.from_dict(layout)
        self._key = key or self._first_key
        if is_url(path):
            from ..storage.objects import Identity, RemoteObject

            if self._remote is None:
                self._remote = RemoteObject.open(path, self._storage_options, Identity.of(self._layout.identity),
                                                 round_trip)
        else:
            try:
                if layout is not None and local_identity(path) != tuple(self._layout.identity):
                    raise InputFileError(path, "changed since it was first opened (size, modification time or "
                                               "inode); open it again")
                self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError as exc:
                raise InputFileError(path, f"cannot be read ({exc.strerror})") from None

    _first_key: str | None = None

    def _describe(self, key: str | None) -> MemberLayout:
        """Open the file's HDF5 metadata, check the member, and keep where its data lie."""
        if is_url(self._path):
            with open_remote(self._path, self._storage_options) as (obj, _, f):
                self._remote = obj
                layout = describe(f, self._path, key, obj.size, obj.object_identity.to_list())
                if key is None:
                    self._first_key = member_keys(domain_group(f, self._path)[1])[0]
                return layout
        with open_local(self._path) as f:
            identity = local_identity(self._path)
            try:
                layout = describe(f, self._path, key, identity[0], identity)
                if key is None:
                    self._first_key = member_keys(domain_group(f, self._path)[1])[0]
            except (KeyError, OSError, RuntimeError, ValueError, TypeError) as exc:   # HDF5 met damage
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise InputFileError(self._path, f"cannot be read as mdCATH ({why}): the file is damaged") from None
            check_offsets(f, self._path, layout, key or self._first_key)
        return layout

    @classmethod
    def guess_format(cls, path: str) -> str | None:
        """HDF5 whose root holds one group with a ``pdbProteinAtoms`` text (a URL: told from its first bytes
        where they hold the root's groups)."""
        path, _ = split_member(path)
        if is_url(path):
            return "MDCATH" if url_looks_like_mdcath(path) else None
        if file_head(path, len(HDF5_MAGIC)) != HDF5_MAGIC:
            return None
        try:
            with h5py.File(path, "r") as f:
                return "MDCATH" if looks_like_mdcath(f) else None
        except Exception:   # noqa: BLE001 - a file HDF5 cannot open is not recognised here
            return None

    @classmethod
    def open(cls, path: str, request: OpenRequest) -> MDCATHSource:
        return cls(path)

    # --------------------------------------------------------------- what it is

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
        """The member's topology: its file's ``pdbProteinAtoms`` as an MDAnalysis Universe (parsed on first use,
        then kept by this Source)."""
        if getattr(self, "_universe", None) is None:
            from . import mdcath_layout

            self._universe = mdcath_layout.universe(self._path, self._storage_options)
        return self._universe

    def own_universe(self):
        """The member's atoms, from its own file (:attr:`universe`): a run needs no topology file."""
        return self.universe

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
        config = {"kind": self.kind, "path": self._path, "member": self._key, "layout": self._layout.to_dict()}
        if self._remote is not None:
            state = self._remote.state()
            config.update(storage_options=state["storage_options"], round_trip=state["round_trip"])
        return config

    def layout_summary(self) -> LayoutFacts:
        return LayoutFacts(format="MDCATH", path=member_location(self._path, self._key), n_frames=self.n_frames,
                           n_atoms=self.n_atoms, fields=self.fields)

    def remote_stats(self) -> dict | None:
        return None if self._remote is None else self._remote.stats.as_dict()

    @property
    def reads_ahead(self) -> bool:
        return self._remote is not None

    # --------------------------------------------------------------- reading

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
        plan = plan_atom_reads(None if atoms is None else np.asarray(atoms, np.int64), self.n_atoms)
        for fl, arr in out.items():
            at = self._layout.coords if fl == "position" else self._layout.forces
            if not arr.shape[1]:
                continue
            self._read_field(at, fl, plan, start, stride, arr)
            if at.scale != 1.0:
                arr *= np.float32(at.scale)
            self.bytes_read += n * plan.n_columns * 3 * np.dtype(at.dtype).itemsize

    def _read_field(self, at: FieldAt, fl: str, plan, start: int, stride: int, out: np.ndarray) -> None:
        n = len(out)
        if self._fd >= 0 and np.dtype(at.dtype) == _NATIVE_F32:
            from ..storage.pread import pread_gather

            frame_bytes = self.n_atoms * 12
            offsets = at.offset + (start + stride * np.arange(n, dtype=np.int64)) * frame_bytes
            widths = plan.runs[:, 1] - plan.runs[:, 0]
            firsts = np.zeros_like(widths)
            np.cumsum(widths[:-1], out=firsts[1:])
            table = np.stack([plan.runs[:, 0] * 12, firsts, widths], axis=1)
            index = np.zeros(0, np.int64) if plan.index is None else np.ascontiguousarray(plan.index, np.int64)
            row = np.empty((plan.n_columns if plan.index is not None else 0, 3), np.float32)
            failed = pread_gather(self._fd, offsets, np.ascontiguousarray(table, np.int64), index, row, out)
            if failed >= 0:
                raise InputFileError(self._path, f"member {self._key}: frame {start + failed * stride} cannot be "
                                                 "read whole: the file is truncated")
            return
        reads = self._chunk_reads(fl, at)
        if plan.index is None:
            ok = reads.read_runs(plan.runs, out, start, stride)
        elif reads.read_gathered(plan.runs, plan.index, out, start, stride):
            return
        else:
            buf = np.empty((n, plan.n_columns, 3), np.float32)
            ok = reads.read_runs(plan.runs, buf, start, stride)
            np.take(buf, plan.index, axis=1, out=out, mode="clip")
        if not ok:
            raise InputFileError(self._path, f"member {self._key}: {fl}s cannot be read at their offsets")

    def _chunk_reads(self, fl: str, at: FieldAt):
        """The reader of one field at its offset, through the object (a URL) or the file's bytes."""
        reads = self._reads.get(fl)
        if reads is None:
            from ..h5md.chunks import ChunkIndex, ChunkReads
            from ..storage.objects import LocalFile

            dtype = np.dtype(at.dtype)
            index = ChunkIndex((self.n_frames, self.n_atoms, 3), None, dtype.str, False, (at.offset,),
                               (self.n_frames * self.n_atoms * 3 * dtype.itemsize,), (0,))
            store = self._remote if self._remote is not None else LocalFile(self._path)
            reads = self._reads[fl] = ChunkReads(store, index)
        return reads

    def prefetch(self, start: int, stop: int, atoms: np.ndarray | None = None,
                 fields: tuple[str, ...] = ("position",), stride: int = 1) -> None:
        """A URL's member: start fetching the bytes the next read with these arguments takes."""
        if self._remote is None or not 0 <= start < stop <= self.n_frames or any(f not in self.fields for f in fields):
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
        if is_url(self._path):
            with open_remote(self._path, self._storage_options) as (_, _, f):
                return self._z(f)
        with open_local(self._path) as f:
            return self._z(f)

    def _z(self, f: h5py.File) -> np.ndarray:
        ds = f[self._layout.domain].get("z")
        if not isinstance(ds, h5py.Dataset) or ds.shape != (self.n_atoms,) or ds.dtype.kind not in "iu":
            raise InputFileError(self._path, f"has no atomic numbers z for its {self.n_atoms} atoms")
        return np.asarray(ds[()], np.int64)

    def close(self) -> None:
        for reads in self._reads.values():
            reads.close()
        self._reads = {}
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._remote is not None:
            self._remote.forget_ahead()


__all__ = ["FRAME_PS", "MEMBER_SEP", "FieldAt", "MDCATHSource", "MemberLayout", "describe", "ensemble_members",
           "member_location", "members", "pdb_text", "split_member", "universe"]
