"""Many trajectory files (segments) presented as one trajectory, opened only when read.

A segment index (JSON, written by ``trajscale split`` or ``trajscale index``)
lists every part with its global frame range, so opening the trajectory opens
no part: a task opens only the segments holding its frames, and at most
``max_open`` stay open (least recently used closed first), so thousands of
parts never exhaust file descriptors and a rank never touches another rank's
parts (seed 001's subfiling; MDAnalysis's ChainReader opens every part).

Index format (paths relative to the index's folder)::

    {"format": "trajscale-segments", "version": 1, "n_atoms": N, "topology": null | "top.tpr",
     "segments": [{"path": "part_000.h5md", "start": 0, "n_frames": 500,
                   "first_time": 0.0, "last_time": 499.0}, ...]}
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from pathlib import Path

import numpy as np

from ..block import Block
from ..errors import ConfigError, InputFileError
from .base import Source

log = logging.getLogger(__name__)

INDEX_FORMAT = "trajscale-segments"
INDEX_NAME = "index.json"
MAX_OPEN = 64


def index_path(path: str | os.PathLike) -> Path | None:
    """The index file behind ``path`` (an index JSON, or a folder holding ``index.json``), else None."""
    p = Path(path)
    if p.is_dir() and (p / INDEX_NAME).is_file():
        return p / INDEX_NAME
    if p.is_file() and p.suffix == ".json":
        return p
    return None


def load_index(path: str | os.PathLike) -> dict:
    """Read and check a segment index; one clear error naming the file otherwise."""
    p = Path(path)
    try:
        index = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise InputFileError(p, f"not a readable segment index ({exc})") from None
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT or not index.get("segments"):
        raise InputFileError(p, "not a trajscale segment index (no 'segments')")
    expect = 0
    for seg in index["segments"]:
        if seg.get("start") != expect or int(seg.get("n_frames", 0)) <= 0:
            raise InputFileError(p, f"segment {seg.get('path')!r} starts at frame {seg.get('start')}, "
                                    f"expected {expect}: the index is not contiguous")
        expect += int(seg["n_frames"])
    return index


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

    kind = "segments"

    def __init__(self, index: str | os.PathLike, topology: str | None = None, max_open: int = MAX_OPEN,
                 group: str | None = None, assume_units: str | None = None) -> None:
        ip = index_path(index)
        if ip is None:
            raise InputFileError(index, f"not a segment index or a folder with {INDEX_NAME}")
        self._index_path = str(ip)
        self.index = load_index(ip)
        self._root = ip.parent
        self.topology = topology or self.index.get("topology")
        if self.topology and not Path(self.topology).is_absolute():
            self.topology = str(self._root / self.topology)
        self.max_open = max(1, int(max_open))
        self._h5md_options = {"group": group, "assume_units": assume_units}
        self.segments = self.index["segments"]
        self._starts = np.array([s["start"] for s in self.segments] + [self.n_frames], dtype=np.int64)
        self._open: OrderedDict[int, Source] = OrderedDict()
        self.opens = 0            # segment files opened so far (for tests and reports)
        self.max_open_seen = 0
        self.bytes_read = 0
        self._fields: tuple[str, ...] | None = None

    @property
    def path(self) -> str:
        return self._index_path

    @property
    def n_frames(self) -> int:
        return int(sum(s["n_frames"] for s in self.segments))

    @property
    def n_atoms(self) -> int:
        return int(self.index["n_atoms"])

    @property
    def chunk_frames(self) -> int:
        """The segments' common length (tasks then follow segment boundaries), else 1."""
        lengths = {s["n_frames"] for s in self.segments[:-1]}
        return lengths.pop() if len(lengths) == 1 else 1

    @property
    def fields(self) -> tuple[str, ...]:
        if self._fields is None:
            self._fields = self.index.get("fields") and tuple(self.index["fields"]) or self._segment(0).fields
        return self._fields

    def get_config(self) -> dict:
        return {"kind": self.kind, "index": self._index_path, "topology": self.topology, "max_open": self.max_open,
                **self._h5md_options}

    def layout_summary(self) -> dict:
        return {"format": "segments", "path": self.path, "n_segments": len(self.segments)}

    def segment_path(self, i: int) -> str:
        p = Path(self.segments[i]["path"])
        return str(p if p.is_absolute() else self._root / p)

    def _segment(self, i: int) -> Source:
        src = self._open.get(i)
        if src is not None:
            self._open.move_to_end(i)
            return src
        while len(self._open) >= self.max_open:
            _, old = self._open.popitem(last=False)
            old.close()
        from . import is_hdf5, open_source

        path = self.segment_path(i)
        if not Path(path).is_file():
            raise InputFileError(path, f"segment {i} of {self._index_path} is missing")
        src = open_source(path, self.topology, **(self._h5md_options if is_hdf5(path) else {}))
        if src.n_frames != self.segments[i]["n_frames"] or src.n_atoms != self.n_atoms:
            src.close()
            raise InputFileError(path, f"has {src.n_frames} frames x {src.n_atoms} atoms; the index "
                                       f"{self._index_path} says {self.segments[i]['n_frames']} x {self.n_atoms}")
        src.reuse_buffers = False   # the segment's arrays are copied into this source's block
        self._open[i] = src
        self.opens += 1
        self.max_open_seen = max(self.max_open_seen, len(self._open))
        return src

    def read(self, start: int, stop: int, atoms: np.ndarray | None = None,
             fields: tuple[str, ...] = ("position",)) -> Block:
        self.check_range(start, stop)
        self.check_request(atoms, fields)
        n = stop - start
        n_sel = self.n_atoms if atoms is None else len(atoms)
        out = {fl: self._out_array(fl, (n, n_sel, 3)) for fl in fields}
        box, time, step = np.zeros((n, 6), np.float32), np.empty(n), np.empty(n, np.int64)
        first = int(np.searchsorted(self._starts, start, side="right") - 1) if n else 0
        i, a = first, start
        while a < stop:   # one read per segment the range touches
            seg_start = int(self._starts[i])
            b = min(stop, int(self._starts[i + 1]))
            blk = self._segment(i).read(a - seg_start, b - seg_start, atoms, fields)
            rows = slice(a - start, b - start)
            for fl, attr in (("position", "positions"), ("velocity", "velocities"), ("force", "forces")):
                if fl in out:
                    out[fl][rows] = getattr(blk, attr)
            box[rows], time[rows], step[rows] = blk.box, blk.time, blk.step
            a, i = b, i + 1
        self.bytes_read += sum(arr.nbytes for arr in out.values())
        return Block(start, stop, out["position"], box, time, step,
                     velocities=out.get("velocity"), forces=out.get("force"))

    def close(self) -> None:
        while self._open:
            _, src = self._open.popitem()
            src.close()


def write_index(path: str | os.PathLike, segments: list[dict], n_atoms: int, topology: str | None = None,
                fields: tuple[str, ...] | None = None) -> None:
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
    if not rel:
        raise ConfigError("a segment index needs at least one segment")
    with atomic_output(path, overwrite=True) as tmp:
        Path(tmp).write_text(json.dumps(index, indent=1))
