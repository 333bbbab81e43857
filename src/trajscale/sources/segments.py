"""Many trajectory files (segments) presented as one trajectory, opened only when read.

A segment index (JSON, from ``trajscale split``/``index``) lists every part's global frame range, so a task opens
only the parts holding its frames, at most ``max_open`` at once (LRU; Khoshlessan et al. 2020's subfiling;
MDAnalysis's ChainReader opens every part). XTC/TRR offsets are scanned once by the preparing process and travel
in the config. Index format (paths relative to the index's folder)::

    {"format": "trajscale-segments", "version": 1, "n_atoms": N, "topology": null | "top.tpr",
     "segments": [{"path": "part_000.h5md", "start": 0, "n_frames": 500,
                   "first_time": 0.0, "last_time": 499.0}, ...],
     "group": "protein", "assume_units": "nm"}   # optional, for H5MD parts (``trajscale index --group``)

A segment may hold ``"file_frames"`` (its last frames repeat the next part's, a GROMACS restart) and
``"shift_step"``/``"shift_time"``, as :func:`~.chain.plan_join` decided.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..block import Block
from ..errors import ConfigError, InputFileError
from ..facts import LayoutFacts
from ..storage.location import Location
from . import INDEX_NAME, registry
from .base import OpenRequest, Source, file_head
from .opened import OpenSources
from .traits import SEGMENTS

log = logging.getLogger(__name__)

INDEX_FORMAT = "trajscale-segments"
MAX_OPEN = 64
#: Most atoms an index may claim (an atom index is a 32-bit integer in the formats trajscale reads).
MAX_ATOMS = 2**31 - 1


def index_path(location: Location) -> Location | None:
    """The index file behind ``location`` (the file or object itself, or a folder's ``index.json``); None if
    neither."""
    if location.identity is not None:
        return location
    inside = location.list(INDEX_NAME)   # (no file's bytes there: a folder's index, if it holds one)
    return inside[0] if inside else None


def load_index(location: Location) -> dict:
    """Read and check a segment index (a file, or an object behind a URL); one clear error naming it otherwise."""
    p = location.where
    try:   # (an index is small: read whole)
        index = json.loads(location.read().decode("utf-8", errors="replace"))
    except (OSError, ValueError) as exc:
        raise InputFileError(p, f"not a readable segment index ({exc})") from None
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT or not index.get("segments"):
        raise InputFileError(p, "not a trajscale segment index (no 'segments')")
    _check_index(p, index)
    expect = 0
    for seg in index["segments"]:
        if seg.get("start") != expect or int(seg.get("n_frames", 0)) <= 0:
            raise InputFileError(p, f"segment {seg.get('path')!r} starts at frame {seg.get('start')}, "
                                    f"expected {expect}: the index is not contiguous")
        expect += int(seg["n_frames"])
    return index


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_index(p: Path, index: dict) -> None:
    """Every field of a segment index has the type and range a reader relies on."""
    def bad(what: str) -> InputFileError:
        return InputFileError(p, f"segment index: {what}")

    if not isinstance(index["segments"], list):
        raise bad("'segments' is not a list")
    n_atoms = index.get("n_atoms")
    if not _is_int(n_atoms) or not 0 < n_atoms <= MAX_ATOMS:
        raise bad(f"'n_atoms' is {n_atoms!r}; expected an integer from 1 to {MAX_ATOMS}")
    for key in ("topology", "group", "assume_units"):
        if index.get(key) is not None and not (isinstance(index[key], str) and index[key]):
            raise bad(f"{key!r} is {index[key]!r}; expected a name")
    fields = index.get("fields")
    if fields is not None and (not isinstance(fields, list) or not fields
                               or any(fl not in ("position", "velocity", "force") for fl in fields)):
        raise bad(f"'fields' is {fields!r}; expected a list of position, velocity, force")
    for k, seg in enumerate(index["segments"]):
        if not isinstance(seg, dict):
            raise bad(f"segment {k} is {seg!r}, not an object")
        path, n = seg.get("path"), seg.get("n_frames")
        if not isinstance(path, str) or not path.strip() or "\0" in path:
            raise bad(f"segment {k} has the path {path!r}")
        if not _is_int(seg.get("start")) or not _is_int(n) or n <= 0:
            raise bad(f"segment {k} ({path}) has start {seg.get('start')!r} and n_frames {n!r}; "
                      "expected integers, n_frames positive")
        ff = seg.get("file_frames", n)
        if not _is_int(ff) or ff < n:
            raise bad(f"segment {k} ({path}) has file_frames {ff!r}; expected an integer >= its n_frames {n}")
        step, time = seg.get("shift_step", 0), seg.get("shift_time", 0.0)
        if not _is_int(step) or abs(step) >= 2**62 or not isinstance(time, (int, float)) or isinstance(time, bool) \
                or not np.isfinite(time):
            raise bad(f"segment {k} ({path}) has shift_step {step!r} and shift_time {time!r}; expected "
                      "an integer and a finite number")
        if seg.get("format") is not None and not isinstance(seg["format"], str):
            raise bad(f"segment {k} ({path}) has the format {seg['format']!r}")
        offsets = seg.get("offsets")
        if offsets is not None and (not isinstance(offsets, str) or len(offsets) != 4 * -(-8 * ff // 3)):
            raise bad(f"segment {k} ({path}) has offsets that are not {ff} frames' (base64 of int64)")


class SegmentedSource(Source):
    """A trajectory stored as consecutive segment files, described by a segment index.

    Parameters
    ----------
    index
        The index JSON, or the folder ``trajscale split`` wrote.
    topology
        Topology for segments in formats other than H5MD (default: the index's own).
    max_open
        Segments kept open at once (least recently used closed first).
    group, assume_units
        Particle group and stated units of H5MD segments (see :class:`~trajscale.sources.H5MDSource`).
    """

    traits = SEGMENTS

    def __init__(self, index: str | os.PathLike | Location | None = None, topology: str | None = None,
                 max_open: int = MAX_OPEN, group: str | None = None, assume_units: str | None = None,
                 segments: list[dict] | None = None, n_atoms: int | None = None,
                 fields: list[str] | None = None, chunk_frames: int | None = None,
                 storage_options: Mapping | None = None) -> None:
        #: Where the index is (the first part, for parts joined): its options read every part, here and on workers.
        self._location = Location.of(index if index is not None else segments[0]["path"] if segments else "",
                                     storage_options)   # (a config's: the preparing process's)
        if segments is None:   # read the index (in the process preparing the job)
            ip = None if index is None else index_path(self._location)
            if ip is None:
                raise InputFileError(index, f"not a segment index or a folder with {INDEX_NAME}")
            loaded = load_index(ip)
            segments = [{**seg, "path": ip.beside(seg["path"]).where} for seg in loaded["segments"]]
            for seg in segments:   # the offsets `trajscale index` recorded are the parts' offsets index (each
                seg.pop("remote", None)   # checked when its part opens); what a part behind a URL holds is
                #                           looked up here, never taken from a file
            n_atoms, fields = loaded["n_atoms"], loaded.get("fields")
            topology = topology or loaded.get("topology")
            group = group or loaded.get("group")   # as `trajscale index --group` recorded them
            assume_units = assume_units or loaded.get("assume_units")
            if topology and ip.local and not os.path.isabs(topology):   # (a topology is read from a local disk)
                topology = ip.beside(topology).where
            index = ip.where
        # else: shipped by get_config (absolute paths, offsets scanned): nothing is read here
        self._index_path = None if index is None else str(index)
        self.topology = topology
        self.max_open = max(1, int(max_open))
        self._h5md_options = {"group": group, "assume_units": assume_units}
        self.segments = segments
        self._n_atoms = int(n_atoms)
        self._starts = np.cumsum([0] + [int(s["n_frames"]) for s in segments], dtype=np.int64)
        #: per segment: (step, time) added to its frames' (the join's renumbering), None for none
        self._shifts = [(int(s.get("shift_step", 0)), float(s.get("shift_time", 0.0)))
                        if s.get("shift_step") or s.get("shift_time") else None for s in segments]
        self._open = OpenSources(self.max_open, self._forget, owner=self)
        # each open part's identity, and those checked since refresh(): a worker stats only the parts it reads
        self._identity: dict[int, tuple] = {}
        self._checked: set[int] = set()
        self._chunk_frames = None if chunk_frames is None else max(1, int(chunk_frames))
        self.bytes_read = 0
        self._fields: tuple[str, ...] | None = tuple(fields) if fields else None

    @classmethod
    def guess_format(cls, path: str, store=None) -> str | None:
        """A folder holding ``index.json``, or a JSON file whose first 64 KiB name the index's format."""
        if store is None:
            p = Path(path)
            if p.is_dir():
                return "SEGMENTS" if (p / INDEX_NAME).is_file() else None
        head = file_head(path, 65536, store)
        return "SEGMENTS" if head.lstrip()[:1] == b"{" and f'"{INDEX_FORMAT}"'.encode() in head else None

    @classmethod
    def open(cls, location: Location, request: OpenRequest) -> SegmentedSource:
        return cls(location, request.topology, group=request.group, assume_units=request.assume_units)

    @classmethod
    def from_parts(cls, parts: list[str | os.PathLike | Location], topology: str | None = None,
                   max_open: int = MAX_OPEN, continuous: bool = False, strict: bool | None = None,
                   group: str | None = None, assume_units: str | None = None) -> SegmentedSource:
        """Parts in formats MDAnalysis reads, in order, as one trajectory (MDAnalysis's ChainReader's job).

        Every part is scanned here, once (atom counts must agree), and joined as :func:`~.chain.plan_join`
        decides (``continuous`` lets overlapping parts join). ``group`` and ``assume_units`` apply to H5MD parts."""
        from ..errors import AtomCountMismatchError

        if not parts:
            raise ConfigError("no trajectory parts given")
        where = [Location.of(p).absolute() for p in parts]
        infos, first = [], None
        for path, part in zip(parts, where, strict=True):
            info = registry.part_record(part, OpenRequest(strict=strict, group=group, assume_units=assume_units))
            if first is None:
                first = (path, info["n_atoms"])
            elif info["n_atoms"] != first[1]:
                raise AtomCountMismatchError(f"{path} has {info['n_atoms']} atoms but {first[0]} has {first[1]}")
            if info["n_frames"] == 0:
                raise InputFileError(path, "has no frames")
            if infos and infos[-1]["damaged"]:   # (the chain would join across a hole)
                from .chain import refuse_damaged_part

                refuse_damaged_part(infos[-1]["path"], infos[-1]["damaged"])
            infos.append(info)
        opened = (registry.for_format(i["format"]).open(part, OpenRequest(
            n_atoms=i["n_atoms"], offsets=i["offsets"], format=i["format"], group=group,
            assume_units=assume_units)) for i, part in zip(infos, where, strict=True))
        segments = joined_segments(infos, opened, continuous)
        return cls(None, topology, max_open, group, assume_units, segments=segments, n_atoms=first[1],
                   storage_options=where[0].options)

    @property
    def path(self) -> str:
        return self._index_path or self.segments[0]["path"]

    @property
    def n_frames(self) -> int:
        return int(self._starts[-1])

    @property
    def n_atoms(self) -> int:
        return self._n_atoms

    @property
    def chunk_frames(self) -> int:
        """Frames per storage chunk inside a part (the first part's for H5MD parts, else 1), from the part's start."""
        if self._chunk_frames is None:
            slabs = self._segment_class(0).supports_slab_reads
            self._chunk_frames = self._segment(0).chunk_frames if slabs else 1
        return self._chunk_frames

    @property
    def part_starts(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self._starts[1:-1])

    @property
    def fields(self) -> tuple[str, ...]:
        if self._fields is None:
            self._fields = self._segment(0).fields
        return self._fields

    def stored_units(self) -> dict[str, str | None]:
        """The first part's (every part of a chain is in one format's units, or converted to trajscale's)."""
        return self._segment(0).stored_units()

    def get_config(self) -> dict:
        """The segment list travels with the config: XTC/TRR parts' frame offsets are scanned here, once."""
        for i, seg in enumerate(self.segments):
            cls = self._segment_class(i)
            if cls.ships_offsets and not seg.get("offsets"):
                info = registry.part_record(self._part(i), OpenRequest(format=seg["format"]))
                if info["n_frames"] != seg.get("file_frames", seg["n_frames"]):
                    expect = seg.get("file_frames", seg["n_frames"])
                    raise InputFileError(seg["path"], f"has {info['n_frames']} frames; the index "
                                                      f"{self._index_path} says {expect}")
                seg["offsets"] = info["offsets"]
        self._look_up_remote_parts()
        return {"kind": self.kind, "index": self._index_path, "topology": self.topology, "max_open": self.max_open,
                **self._h5md_options, "segments": [{k: seg.get(k) for k in _SHIPPED if k in seg}
                                                   for seg in self.segments],
                "n_atoms": self._n_atoms, "fields": list(self.fields), "chunk_frames": self.chunk_frames,
                "storage_options": self._location.options or None}

    def _look_up_remote_parts(self) -> None:
        """Each part behind a URL is opened here once and its ``remote_state`` (up to :data:`SHIP_PARTS_BYTES`)
        travels with it: a worker then reads it without walking its metadata over the network."""
        shipped = sum(_metadata_bytes(seg.get("remote")) for seg in self.segments)
        for i, seg in enumerate(self.segments):
            if seg.get("remote") is not None or not self._part(i).costs_request:
                continue
            state = getattr(self._segment(i), "remote_state", lambda: None)()
            if state is None:
                continue
            size = _metadata_bytes(state)
            if size and shipped + size > SHIP_PARTS_BYTES:
                state = {**state, "metadata": None}
            else:
                shipped += size
            seg["remote"] = state

    def layout_summary(self) -> LayoutFacts:
        formats = sorted({str(s.get("format") or Path(s["path"]).suffix.lstrip(".").upper()) for s in self.segments})
        return LayoutFacts(format="segments", path=self.path, n_segments=len(self.segments),
                           segment_formats=",".join(formats), n_atoms=self._n_atoms, decoding=_decoding(formats))

    def decode_seconds_per_frame(self) -> float:
        costs = [registry.decode_s_per_atom(str(s.get("format"))) for s in self.segments]
        return max(costs) * self._n_atoms

    def segment_path(self, i: int) -> str:
        return str(self.segments[i]["path"])

    def _part(self, i: int) -> Location:
        """Segment ``i``'s location, read with the index's options."""
        return self._location.at(self.segment_path(i))

    def _segment_class(self, i: int) -> type[Source]:
        """The Source of segment ``i``'s format (recorded in the segment, else told by the file's bytes)."""
        seg = self.segments[i]
        if seg.get("format") is None:
            seg["format"] = registry.guess(self._part(i)).format
        return registry.for_format(seg["format"])

    def refresh(self) -> None:
        """A new task: each open part is checked (one stat) the first time the task reads it."""
        self._checked.clear()

    def _segment(self, i: int) -> Source:
        src = self._open.use(i)
        shipped = self.segments[i].get("remote")
        if src is not None and i not in self._checked:
            if shipped is None and self._part(i).identity != self._identity[i]:
                # rewritten in place (or replaced) since it was opened: its handle would read stale data
                log.debug("%s changed since it was opened: reopening", self.segment_path(i))
                self._open.drop(i)
                src = None
            else:
                self._checked.add(i)
        if src is not None:
            return src
        self._open.make_room()
        seg, path = self.segments[i], self.segment_path(i)
        # before opening: a rewrite after it is noticed next task (a URL's: as shipped, checked by If-Match)
        ident = self._part(i).identity if shipped is None else (path, *shipped["identity"])
        if ident is None:
            raise InputFileError(path, f"segment {i} of {self._index_path or 'the trajectory'} is missing")
        cls = self._segment_class(i)
        # offsets shipped by get_config (None only before it ran, in the preparing process)
        src = cls.open(self._part(i), OpenRequest(n_atoms=self._n_atoms, offsets=seg.get("offsets"),
                                                  format=seg["format"], shipped=shipped, **self._h5md_options))
        expect = seg.get("file_frames", seg["n_frames"])
        if src.n_frames != expect or src.n_atoms != self.n_atoms:
            src.close()
            raise InputFileError(path, f"has {src.n_frames} frames x {src.n_atoms} atoms; the index "
                                       f"{self._index_path or '(the parts as scanned)'} says {expect} x {self.n_atoms}")
        src.reuse_buffers = False   # the segment's arrays are copied into this source's block
        self._open.add(i, src, path)
        self._identity[i] = ident
        self._checked.add(i)
        return src

    @property
    def opens(self) -> int:
        """Segment files opened so far (for tests and reports)."""
        return self._open.opens

    @property
    def opened(self) -> list[str]:
        """Their paths, in the order opened (a report's ``files_opened``)."""
        return self._open.opened

    def bytes_per_frame(self, atoms: np.ndarray | None = None,
                        fields: tuple[str, ...] = ("position",)) -> int:
        # this source's block, plus the block a part that does not fill rows allocates before the copy
        seg = self._segment(0)
        return super().bytes_per_frame(atoms, fields) + (0 if seg.fills_rows else seg.bytes_per_frame(atoms, fields))

    def read(self, start: int, stop: int, atoms: np.ndarray | None = None,
             fields: tuple[str, ...] = ("position",), stride: int = 1) -> Block:
        self.check_range(start, stop)
        self.check_request(atoms, fields)
        if len(range(start, stop, stride)):
            self._segment(self._first_segment(start))   # opened (its atoms checked) before any allocation
        return self._read_rows(start, stop, atoms, fields, stride)

    def _first_segment(self, start: int) -> int:
        return int(np.searchsorted(self._starts, start, side="right") - 1)

    def read_into(self, start: int, stop: int, atoms: np.ndarray | None, stride: int,
                  out: dict[str, np.ndarray], box: np.ndarray, time: np.ndarray, step: np.ndarray) -> None:
        i, a, row = self._first_segment(start), start, 0
        while a < stop:   # one read per segment the range touches (a: the next kept frame)
            seg_start, seg_stop = int(self._starts[i]), int(self._starts[i + 1])
            b = min(stop, seg_stop)
            if a < b:
                rows = slice(row, row + len(range(a, b, stride)))
                self._segment(i).read_into(a - seg_start, b - seg_start, atoms, stride,
                                           {fl: arr[rows] for fl, arr in out.items()}, box[rows], time[rows],
                                           step[rows])
                if self._shifts[i] is not None:   # a renumbered part (chain.plan_join)
                    step[rows] += self._shifts[i][0]
                    time[rows] += self._shifts[i][1]
                row = rows.stop
                a += (rows.stop - rows.start) * stride
            i += 1
        self.bytes_read += sum(arr.nbytes for arr in out.values())

    def _forget(self, i: int, src: Source) -> None:
        """A part closed (least recently used, or changed since it was opened): checked anew when reopened."""
        self._identity.pop(i, None)
        self._checked.discard(i)

    def remote_stats(self) -> dict | None:
        """The requests, bytes, network wait and retries of the parts behind URLs opened so far (None: none)."""
        return self._open.remote_stats()

    def close(self) -> None:
        self._open.close()


def _decoding(formats: list[str]) -> str | None:
    """Who decodes the parts' frames beyond the selected atoms (whole frames when several readers); None: in place."""
    said = {d for d in (registry.decoding_of(f) for f in formats) if d}
    if len(said) <= 1:
        return next(iter(said), None)
    return "whole:" + " and ".join(sorted({d.partition(":")[2] for d in said}))


#: Keys of a segment that travel in the config.
_SHIPPED = ("path", "start", "n_frames", "format", "offsets", "file_frames", "shift_step", "shift_time", "remote")
#: Most bytes of HDF5 metadata a segment list ships for its parts behind URLs, all parts together.
SHIP_PARTS_BYTES = 8 * 1024**2


def _metadata_bytes(state: dict | None) -> int:
    """The bytes of HDF5 metadata a part's shipped state holds (base64 text, as it travels)."""
    return sum(len(text) for _, text in (state or {}).get("metadata") or ())


def joined_segments(infos: list[dict], opened, continuous: bool = False) -> list[dict]:
    """Segments (``infos``) with their global starts as the parts join (each part closed once the next is planned)."""
    from .chain import plan_join

    held: list[Source] = []

    def each():
        try:
            for src in opened:
                held.append(src)
                yield src
                while len(held) > 2:
                    held.pop(0).close()
        finally:
            for src in held:
                src.close()

    gen = each()
    try:
        join = plan_join(gen, continuous)
    finally:
        gen.close()
    if join.describe():
        log.warning("%s", join.describe())
    segments, start = [], 0
    for info, fj in zip(infos, join.files, strict=False):
        seg = {**info, "start": start, "n_frames": fj.n_kept}
        if fj.n_kept != fj.n_frames:
            seg["file_frames"] = fj.n_frames
        if fj.first_time is not None:
            seg.update(first_time=fj.first_time, last_time=fj.last_time)
        if fj.shift_step or fj.shift_time:
            seg.update(shift_step=fj.shift_step, shift_time=fj.shift_time)
        if fj.n_kept:   # a part wholly replaced by the next one (--continuous) is left out
            segments.append(seg)
            start += fj.n_kept
    return segments


def write_index(path: str | os.PathLike, segments: list[dict], n_atoms: int, topology: str | None = None,
                fields: tuple[str, ...] | None = None, group: str | None = None,
                assume_units: str | None = None) -> None:
    """Write a segment index (temporary name, then renamed); paths are stored relative to its folder."""
    from ..util import atomic_output

    root = Path(path).resolve().parent
    rel = []
    for seg in segments:
        p = Path(seg["path"]).resolve()
        try:
            shown = str(p.relative_to(root))
        except ValueError:
            shown = str(p)
        rel.append({**seg, "path": shown})
    index = {"format": INDEX_FORMAT, "version": 1, "n_atoms": int(n_atoms), "topology": topology,
             "fields": list(fields) if fields else None, "segments": rel}
    index.update({k: v for k, v in (("group", group), ("assume_units", assume_units)) if v is not None})
    if not rel:
        raise ConfigError("a segment index needs at least one segment")
    with atomic_output(path, overwrite=True) as tmp:
        Path(tmp).write_text(json.dumps(index, indent=1))
