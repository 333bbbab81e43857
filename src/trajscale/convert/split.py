"""Split an H5MD file into segment files plus a segment index, and index existing parts.

The index is written last, so a folder with an index is always complete.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from ..block import split_frames
from ..errors import AtomCountMismatchError, InputFileError
from ..h5md.codecs import ENCODING_OF
from ..h5md.layout import Layout
from ..h5md.writer import H5MDWriter
from ..sources import H5MDSource
from ..sources.segments import INDEX_NAME, write_index
from ..storage.location import Location
from ..util import atomic_output, check_output_path

log = logging.getLogger(__name__)

SLAB_BYTES = 64 * 1024**2


def split(path: str | os.PathLike, out_dir: str | os.PathLike, n_parts: int, *, layout: Layout | None = None,
          group: str | None = None, overwrite: bool = False, assume_units: str | None = None) -> str:
    """Write ``n_parts`` segments of ``path`` and ``out_dir/index.json``; return the index path.

    ``assume_units`` states the units of an input whose datasets carry none (the segments state theirs).
    No part and no index is ever the input; existing ones are replaced only with ``overwrite``.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputFileError(out, "exists and is not a folder")
    if out.is_dir():   # every name is checked before anything is written
        check_output_path(out / INDEX_NAME, overwrite, inputs=[path])
    else:   # the folder is made: its parent must take it
        check_output_path(out, overwrite, inputs=[path])
    segments = []
    with H5MDSource(str(path), group=group, assume_units=assume_units) as src:
        if not src.n_frames:
            raise InputFileError(path, "has no frames: nothing to split")
        ranges = split_frames(src.n_frames, n_parts, align=src.chunk_frames)
        parts = [out / f"part_{k:03d}.h5md" for k in range(len(ranges))]
        for part in parts if out.is_dir() else ():
            check_output_path(part, overwrite, inputs=[path])
        out.mkdir(parents=True, exist_ok=True)
        fields = src.fields
        pg = src.file[f"particles/{src.info.group}"]   # (what does not change with time)
        extras = {k: pg[k][()] for k in ("species", "mass", "charge") if k in pg}
        layout, stored = _stored_like(src, layout or Layout())
        for part, r in zip(parts, ranges, strict=False):
            _copy_range(src, r.start, r.stop, part, layout, fields, extras, stored)
            meta = src.read(r.start, r.start + 1, np.array([0])), src.read(r.stop - 1, r.stop, np.array([0]))
            segments.append({"path": str(part), "start": r.start, "n_frames": len(r),
                             "first_time": float(meta[0].time[0]), "last_time": float(meta[1].time[0])})
            log.info("wrote %s (frames %d-%d)", part, r.start, r.stop)
        index = out / INDEX_NAME
        write_index(index, segments, src.n_atoms, fields=fields)
    return str(index)


def _stored_like(src: H5MDSource, layout: Layout) -> tuple[Layout, dict]:
    """The parts' layout and writer options: a lossy input's parts are written in its units at its precision
    (every value lands on the grid it came from, so a part states and checks the same bound) and keep its
    compression unless ``layout`` names one (rounded positions stored unfiltered would save nothing).
    """
    if src.info.lossy is None:
        return layout, {}
    precision, _, encoding = src.info.lossy
    if layout.compression is None:
        comp = src.layout_summary().compression or "none"
        layout = Layout.parse(str(layout.chunks), comp, layout.fletcher32)
    encoding = ENCODING_OF.get(encoding, "floats")
    # delta-coded parts keep the input's references (planned from its first frame): the same stored values
    reference = src.read(0, 1, None, ("position",)).positions[0] if encoding == "deltas" else None
    return layout, {"precision": precision, "encoding": encoding, "reference": reference,
                    "units": dict(src.info.units)}


def _copy_range(src: H5MDSource, start: int, stop: int, part: Path, layout: Layout, fields, extras,
                stored: dict | None = None) -> None:
    per = max(1, SLAB_BYTES // max(1, src.n_atoms * 12 * len(fields)))
    periodic = bool(src.read(start, start + 1, np.array([0])).box[:, :3].any())
    with atomic_output(part, overwrite=True) as tmp:
        with H5MDWriter(tmp, src.n_atoms, n_frames=stop - start, layout=layout, fields=fields,
                        box="triclinic" if periodic else None, group=src.info.group,
                        species=extras.get("species"), masses=extras.get("mass"),
                        charges=extras.get("charge"), **(stored or {})) as w:
            for a in range(start, stop, per):
                b = src.read(a, min(stop, a + per), None, fields)
                w.write(position=b.positions, velocity=b.velocities, force=b.forces, step=b.step,
                        time=b.time, box=b.box)


def build_index(parts: list[str], output: str | os.PathLike, topology: str | None = None, *,
                group: str | None = None, assume_units: str | None = None, overwrite: bool = False,
                continuous: bool = False) -> str:
    """Describe existing parts (any format MDAnalysis reads) as one trajectory; check order and atoms.

    The parts join as :func:`~trajscale.sources.chain.plan_join` decides (an overlap refused unless
    ``continuous``).  ``group`` and ``assume_units`` apply to H5MD parts, and the index keeps them.
    ``output`` is never a part or the topology; an existing one is replaced only with ``overwrite``.
    """
    from ..sources.base import OpenRequest
    from ..sources.registry import open_part
    from ..sources.segments import joined_segments

    request = OpenRequest(topology=topology, group=group, assume_units=assume_units)   # H5MD's for H5MD parts
    if not parts:
        raise InputFileError(output, "no parts given")
    check_output_path(output, overwrite, inputs=[*parts, topology])
    first: list = []

    def opened():
        for info, path in zip(infos, parts, strict=True):
            if not Path(path).is_file():
                raise InputFileError(path, "no such part")
            src = open_part(Location(path), request)
            if src.ships_offsets:   # XTC/TRR: the frame offsets, so a reader (remote above all) scans nothing
                info.update(format=src.format, offsets=src.get_config()["offsets"])
            if src.n_frames == 0:
                src.close()
                raise InputFileError(path, "has no frames")
            if not first:
                first[:] = [src.n_atoms, src.fields]
            elif src.n_atoms != first[0]:
                src.close()
                raise AtomCountMismatchError(f"{path} has {src.n_atoms} atoms but {parts[0]} has {first[0]}")
            yield src

    infos = [{"path": str(Path(path).resolve())} for path in parts]
    segments = joined_segments(infos, opened(), continuous)
    for seg in (s for s in segments if "first_time" not in s):   # a single part: its times not read yet
        with open_part(Location(seg["path"]), request) as src:
            t = [float(src.read(i, i + 1, np.array([0])).time[0]) + float(seg.get("shift_time", 0.0))
                 for i in (0, seg["n_frames"] - 1)]
        seg.update(first_time=t[0], last_time=t[1])
    n_atoms, fields = first
    top = str(Path(topology).resolve()) if topology else None
    write_index(output, segments, n_atoms, topology=top, fields=fields, group=group, assume_units=assume_units)
    return str(output)
