"""Describe an H5MD file's layout and what each access pattern costs on it.

Read amplification = bytes HDF5 must read and decompress / bytes requested, from the chunk geometry. A
compressed chunk is always decoded whole; an uncompressed one is read whole when it fits the reader's chunk
cache, in place when it does not. Two figures follow: trajscale's reader (no cache for whole-frame chunks; two
chunk rows for chunks that split xyz) and a generic reader with HDF5's default 1 MiB cache (MDAnalysis, h5py).
"""

from __future__ import annotations

import io
import math
import os
import shlex

import h5py
import numpy as np

from ..block import sorted_unique
from ..errors import NotH5MDError
from ..facts import CONTIGUOUS, LayoutFacts, Precision
from ..hdf5.chunks import chunk_info
from ..hdf5.hdf5 import checked_store, open_h5, opens_collectively
from ..hdf5.runs import plan_atom_reads
from ..storage.bytestore import ReadOnlyFile
from ..storage.ranges import coalesce
from .codecs import ENCODING_OF
from .layout import REMOTE_MIN_CHUNK_BYTES, plan_frames_per_chunk, reader_chunk_cache
from .schema import H5MDInfo, describe, particle_groups


def scattered_selection(n_atoms: int) -> np.ndarray:
    """A CA-like selection: every 15th atom of a 3,300-atom protein at the start, and the last atom (an ion)."""
    return sorted_unique(np.r_[np.arange(0, min(3300, n_atoms), 15), n_atoms - 1])


PATTERNS = {
    "one frame": (1, None),
    "block of 100 frames": (100, None),
    "150-atom subset, 100 frames": (100, 150),
    "scattered selection (CA + last atom), 100 frames": (100, scattered_selection),
}


HDF5_DEFAULT_CACHE = 1024**2


def patterns_for(n_frames: int, n_atoms: int) -> dict:
    """The access patterns a file of this size can serve, as (frames, atoms: None, a count, or indices)."""
    out = {}
    for name, (f, a) in PATTERNS.items():
        a = a(n_atoms) if callable(a) else a
        if isinstance(a, int) and a >= n_atoms:
            continue
        if f > n_frames > 1:
            f, name = n_frames, name.replace(f"block of {f} frames", f"all {n_frames} frames") \
                .replace(f"{f} frames", f"all {n_frames} frames")
        elif f > n_frames:
            continue
        out[name] = (f, a)
    return out


def amplification(shape: tuple[int, int, int], chunks: tuple[int, ...] | None,
                  n_frames: int, n_atoms=None, compressed: bool = True,
                  cache_bytes: int = 0, itemsize: int = 4, step: int = 1) -> float:
    """Read amplification of ``n_frames`` frames (every ``step``-th) of ``n_atoms`` (None, a count, or indices)."""
    f_total, a_total, _ = shape
    n_frames = max(1, min(n_frames, f_total))
    if n_atoms is not None and np.ndim(n_atoms) == 0:
        n_atoms = np.arange(max(1, min(int(n_atoms), a_total)))
    plan = plan_atom_reads(n_atoms, a_total)
    asked = n_frames * (a_total if n_atoms is None else len(n_atoms)) * 3
    if not chunks or (not compressed and math.prod(chunks) * itemsize > cache_bytes):
        return n_frames * plan.n_columns * 3 / asked   # read in place: only the runs
    cf, ca = chunks[0], chunks[1]
    # edge chunks are stored (and decoded) at full size, so no clamping to the dataset
    frames_read = (math.ceil(n_frames / cf) if step == 1 else
                   len(sorted_unique(np.arange(n_frames) * step // cf))) * cf
    atoms_read = ca * _chunks_touched(plan.runs, ca)
    comp_read = math.ceil(3 / chunks[2]) * chunks[2]
    return (frames_read * atoms_read * comp_read) / asked


def _chunks_touched(runs: np.ndarray, ca: int) -> int:
    """Atom chunks of ``ca`` atoms that the runs (sorted ``[lo, hi)`` ranges) touch."""
    count, last = 0, -1
    for lo, hi in runs.tolist():
        first, end = max(lo // ca, last + 1), (hi - 1) // ca
        count += max(0, end - first + 1)
        last = max(last, end)
    return count


def layout_facts(info: H5MDInfo, file_bytes: int | None = None, collective_open: bool = True) -> LayoutFacts:
    """Layout summary of a described group; ``collective_open``: whether MPI ranks open it together (not a URL)."""
    shape = (info.n_frames, info.n_atoms, 3)
    comp = bool(info.compression)
    item = int(info.dtype[-2:]) // 8 if info.dtype[-2:].isdigit() else 4
    ours = reader_chunk_cache(shape, info.chunks, item, filtered=comp)
    patterns = patterns_for(info.n_frames, info.n_atoms)
    amp = {name: round(amplification(shape, info.chunks, f, a, comp, ours, item), 2)
           for name, (f, a) in patterns.items()}
    amp_default = {name: round(amplification(shape, info.chunks, f, a, comp, HDF5_DEFAULT_CACHE, item), 2)
                   for name, (f, a) in patterns.items()}
    comp_name = info.compression or "none"
    if info.compression_opts is not None and info.compression:
        comp_name += f":{info.compression_opts}"
    return LayoutFacts(
        format="h5md", path=info.path, group=info.group, n_frames=info.n_frames, n_atoms=info.n_atoms,
        fields=tuple(info.fields), units=tuple(info.units.items()), assumed_units=info.assumed_units,
        dtype=info.dtype, chunks=tuple(info.chunks) if info.chunks else CONTIGUOUS, compression=comp_name,
        read_amplification=tuple(amp.items()),
        # what `rechunk --chunks auto` would write: advice never suggests the layout the file has
        planned_chunks=(plan_frames_per_chunk(info.n_atoms, item), info.n_atoms, 3),
        # (option: what convert/rechunk --encoding wrote it)
        precision=None if not info.lossy else Precision(info.lossy[0], info.lossy[1], info.lossy[2],
                                                        ENCODING_OF.get(info.lossy[2], "floats")),
        read_amplification_hdf5_default=tuple(amp_default.items()),
        file_bytes=file_bytes, warnings=tuple(layout_warnings(info, amp_default, amp)), collective_open=collective_open)


def facts_amplification(facts: LayoutFacts, atoms: np.ndarray | None, n_frames: int, step: int = 1,
                        cache: str = "trajscale") -> float | None:
    """Read amplification of ``atoms`` over ``n_frames`` frames of the group ``facts`` describes; None if not H5MD."""
    if facts.format != "h5md" or facts.n_atoms is None or facts.n_frames is None:
        return None
    shape = (facts.n_frames, facts.n_atoms, 3)
    chunks = facts.chunks or None   # None: contiguous (or not recorded)
    comp = (facts.compression or "none").split(":")[0] not in ("none", "")
    dtype = facts.dtype or ""
    item = int(dtype[-2:]) // 8 if dtype[-2:].isdigit() else 4
    nbytes = HDF5_DEFAULT_CACHE if cache == "hdf5" else reader_chunk_cache(shape, chunks, item, filtered=comp)
    return round(amplification(shape, chunks, max(1, n_frames), atoms, comp, nbytes, item, step), 2)


def layout_warnings(info: H5MDInfo, amp: dict, amp_ours: dict | None = None) -> list[str]:
    """Plain-language warnings about layouts that fight the access pattern (``amp_ours``: trajscale's own)."""
    ours = amp if amp_ours is None else amp_ours
    out = []
    ch = info.chunks
    if info.n_frames == 0:   # nothing to read, so no read to warn about
        return out
    if ch and ch[0] > 1 and ch[1] < info.n_atoms:
        n_split = math.ceil(info.n_atoms / ch[1])
        out.append(
            f"chunks {tuple(ch)} mix {ch[0]} frames and split each frame's atoms over {n_split} chunks "
            f"(h5py's automatic chunking, the seed paper's slow file): with HDF5's default chunk "
            f"cache reading one frame costs {amp['one frame']:.0f}x its size and touches {n_split} chunks. "
            f"Fix: trajscale rechunk {os.path.basename(info.path)} -o fixed.h5md --chunks auto")
    elif ch and ours["one frame"] > 8:
        out.append(f"chunks hold {ch[0]} frames: a single-frame read costs {ours['one frame']:.0f}x its size; "
                   f"fine for block reads, slow for random access (--chunks frame fixes it)")
    if ch and ch[1] < info.n_atoms and ch[0] == 1:
        out.append(f"chunks split each frame into {math.ceil(info.n_atoms / ch[1])} pieces: block reads "
                   f"make many small I/O requests; --chunks auto keeps a frame's atoms together")
    return out


def time_facts(f: h5py.File, info: H5MDInfo) -> dict | None:
    """First and last time (ps), the interval (median, and whether it varies), first and last step; None if none."""
    if info.n_frames == 0 or (info.time.path is None and info.time.fixed is None):
        return None
    t = info.time.values(f, 0, info.n_frames, np.float64)
    steps = (info.step.values(f, 0, info.n_frames, np.int64)
             if info.step.path is not None or info.step.fixed is not None else None)
    return times_summary(t, steps)


def times_summary(t: np.ndarray, steps: np.ndarray | None = None) -> dict | None:
    """``time_facts`` of frames' times (ps) and steps, from whatever file they were read."""
    if not len(t):
        return None
    dt = np.diff(t)
    out = {"first": float(t[0]), "last": float(t[-1]), "unit": "ps",
           "dt": float(np.median(dt)) if len(dt) else None,
           # float32 times: intervals equal within their rounding count as even
           "even": bool(len(dt) == 0 or np.allclose(dt, np.median(dt), rtol=1e-4, atol=1e-6 * max(1.0, abs(t[-1]))))}
    if steps is not None:
        out["steps"] = [int(steps[0]), int(steps[-1])]
    if not out["even"]:
        out["dt_range"] = [float(dt.min()), float(dt.max())]
    return out


def inspect_file(path: str | os.PathLike, group: str | None = None, assume_units: str | None = None) -> dict:
    """Everything ``trajscale inspect`` prints, as a dict: every particle group, and ``group``'s layout."""
    store = checked_store(path)   # its metadata read afresh, not cached
    f, size, collective = open_h5(store, kept_metadata=False), store.size, opens_collectively(store)
    with f:
        names = particle_groups(f) if isinstance(f.get("particles"), h5py.Group) else []
        listing = {}
        for name in names:
            try:
                g = describe(f, name, assume_units)
            except NotH5MDError as exc:   # listed with its problem; an error only if it is the one read
                listing[name] = {"problem": exc.problem}
                continue
            listing[name] = {"n_frames": g.n_frames, "n_atoms": g.n_atoms, "fields": list(g.fields),
                             "units": dict(g.units)}
        if group is None and len(names) > 1:
            facts = {"format": "h5md", "path": f.filename, "group": None}
            if size is not None:
                facts["file_bytes"] = size
        else:
            info = describe(f, group, assume_units)
            facts = layout_facts(info, size, collective).to_dict()
            facts["observables"] = list(info.observables)
            facts["boundary"] = list(info.boundary)
            facts["time"] = time_facts(f, info)
        facts.update(space_facts(f, size))
        facts["groups"] = sorted(f["particles"].keys())
        facts["particle_groups"] = listing
        h5md = f.get("h5md")
        if h5md is not None:
            facts["h5md_version"] = [int(v) for v in h5md.attrs.get("version", [])]
            creator = h5md.get("creator")
            if isinstance(creator, h5py.Group):
                facts["creator"] = f"{creator.attrs.get('name', '')} {creator.attrs.get('version', '')}".strip()
    return facts


def space_facts(f: h5py.File, size: int) -> dict:
    """``stored_bytes`` and ``unused_bytes`` (space freed by writes, forgotten at close) of an open file."""
    stored = [0]

    def add(_name, obj) -> None:
        if isinstance(obj, h5py.Dataset) and not obj.is_virtual:
            stored[0] += obj.id.get_storage_size()
    f.visititems(add)
    return {"stored_bytes": stored[0], "unused_bytes": max(0, size - stored[0])}


def unused_space_note(facts: dict) -> str | None:
    """One line when over 5 % (and over 1 MB) of a file holds no data, else None."""
    size, unused = facts.get("file_bytes", 0), facts.get("unused_bytes", 0)
    if not size or unused <= max(0.05 * size, 1e6):
        return None
    return (f"{unused / 1e6:.1f} MB of the file's {size / 1e6:.1f} MB ({100 * unused / size:.0f} %) hold no data "
            "(space freed by earlier writes, which HDF5 does not reuse once the file was closed); "
            "`h5repack FILE COPY` or `trajscale rechunk FILE -o COPY` writes a compact copy")


#: How trajscale reads an H5MD store behind a URL (:mod:`trajscale.storage`'s values): metadata through a cache
#: of whole blocks; frames by range requests, merged within the gap, cut at the longest request.
REMOTE_BLOCK_BYTES = 256 * 1024
REMOTE_MERGE_GAP = 64 * 1024   # the remote reader's default (trajscale.storage.ranges.MERGE_GAP)
REMOTE_MAX_REQUEST = 8 * 1024**2


class RecordingFile(ReadOnlyFile):
    """A read-only file object over another binary file object that records the byte ranges read."""

    def __init__(self, raw) -> None:
        super().__init__()
        self.raw = raw
        self.ranges: list[tuple[int, int]] = []

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def readinto(self, buf) -> int:
        at = self.raw.tell()
        n = self.raw.readinto(buf)
        if n:
            self.ranges.append((at, at + n))
        return n


def request_cost(ranges: list[tuple[int, int]], gap: int, max_request: int) -> tuple[int, int]:
    """(requests, bytes) of fetching ``ranges`` as the remote reader does (merged within ``gap``, cut at the max)."""
    merged = coalesce(ranges, gap, max_request)[0]
    return sum(-(-(b - a) // max_request) for a, b in merged), sum(b - a for a, b in merged)


def frame_ranges(ds: h5py.Dataset, frames: np.ndarray, atoms) -> tuple[list[tuple[int, int]], bool]:
    """The byte ranges a remote read of ``frames`` x ``atoms`` fetches, and whether they lie within frames."""
    n_frames, n_atoms, n3 = ds.shape
    if atoms is not None and np.ndim(atoms) == 0:
        atoms = np.arange(max(1, min(int(atoms), n_atoms)))
    runs = plan_atom_reads(atoms, n_atoms).runs
    item = ds.dtype.itemsize * n3
    frames = np.asarray(frames, dtype=np.int64)
    filtered = ds.id.get_create_plist().get_nfilters() > 0
    if ds.chunks is None or (not filtered and tuple(ds.chunks[1:]) == tuple(ds.shape[1:])):
        cf = n_frames if ds.chunks is None else ds.chunks[0]
        rows = {}
        for r in sorted_unique(frames // cf).tolist():
            rows[r] = ds.id.get_offset() if ds.chunks is None else chunk_info(ds, (r * cf, 0, 0))[0]
        out = []
        for fr in frames.tolist():
            base = rows[fr // cf]
            if base is None or base < 0:   # (never written)
                continue
            row = base + (fr % cf) * n_atoms * item
            out += [(row + lo * item, row + hi * item) for lo, hi in runs.tolist()]
        return out, True
    cf, ca, c3 = ds.chunks
    lo, hi = int(runs[:, 0].min()), int(runs[:, 1].max())
    out = []
    for r in sorted_unique(frames // cf).tolist():
        for c in range(lo // ca, (hi - 1) // ca + 1):
            for d in range(-(-n3 // c3)):
                offset, size, _ = chunk_info(ds, (r * cf, c * ca, d * c3))
                if offset >= 0:
                    out.append((offset, offset + size))
    return out, False


def opening_cost(fileobj, size: int, group: str | None = None, assume_units: str | None = None,
                 block_bytes: int = REMOTE_BLOCK_BYTES) -> dict:
    """What opening the file in ``fileobj`` costs a remote reader before its first frame (``metadata``, then
    ``times``), through ``block_bytes`` blocks, measured by a :class:`RecordingFile`."""
    rec = RecordingFile(fileobj)
    fileobj.seek(0)
    with h5py.File(rec, "r") as f:
        info = describe(f, group, assume_units)
        ds = f[info.dataset()]
        if ds.chunks is not None:
            for i in range(ds.id.get_num_chunks()):
                ds.id.get_chunk_info(i)
        meta = list(rec.ranges)
        time_facts(f, info)
        times = rec.ranges[len(meta):]

    def blocks(ranges) -> set[int]:
        return {k for a, b in ranges for k in range(a // block_bytes, (b - 1) // block_bytes + 1)}

    def cost(ks) -> dict:
        return {"requests": len(ks), "bytes": int(sum(min(size, (k + 1) * block_bytes) - k * block_bytes
                                                      for k in ks))}
    mb = blocks(meta)
    return {"metadata": {**cost(mb), "last_byte": int(max((b for _, b in meta), default=0))},
            "times": cost(blocks(times) - mb)}


def remote_costs(f: h5py.File, info: H5MDInfo, fileobj=None, size: int | None = None, atoms: dict | None = None,
                 block_bytes: int = REMOTE_BLOCK_BYTES, merge_gap: int = REMOTE_MERGE_GAP,
                 max_request: int = REMOTE_MAX_REQUEST) -> dict:
    """Requests and bytes of reading the group ``info`` over the network, for each access pattern (and opening)."""
    ds = f[info.dataset()]
    patterns = patterns_for(info.n_frames, info.n_atoms)
    n = min(100, info.n_frames)
    for label, idx in (atoms or {}).items():
        patterns[f"{label}, {'all ' if n == info.n_frames else ''}{n} frames"] = (n, idx)
    out: dict = {"block_bytes": block_bytes, "merge_gap": merge_gap, "max_request": max_request, "patterns": {}}
    if fileobj is not None:
        out["opening"] = opening_cost(fileobj, size, info.group, info.assumed_units, block_bytes)
    item = ds.dtype.itemsize * 3
    for name, (k, a) in patterns.items():
        if not info.n_frames:
            break
        ranges, in_frames = frame_ranges(ds, np.arange(k), a)
        requests, nbytes = request_cost(ranges, merge_gap if in_frames else 0, max_request)
        n_sel = info.n_atoms if a is None else (int(a) if np.ndim(a) == 0 else len(a))
        out["patterns"][name] = {"requests": requests, "bytes": nbytes, "asked": k * n_sel * item}
    if ds.chunks is not None and info.n_frames:
        sizes = [ds.id.get_chunk_info(i).size for i in range(min(ds.id.get_num_chunks(), 1000))]
        out["chunk_bytes"] = [int(min(sizes)), int(max(sizes))] if sizes else None
    return out


def remote_cost_lines(facts: dict, path: str) -> list[str]:
    """``inspect``'s remote-cost section of ``facts["remote_costs"]`` (:func:`remote_costs`)."""
    c = facts["remote_costs"]
    lines = [f"over the network (range requests; metadata in blocks of {c['block_bytes'] // 1024} KiB, "
             f"ranges merged across gaps below {c['merge_gap'] // 1024} KiB):"]
    op = c.get("opening")
    if op:
        for what, label in (("metadata", "metadata (HDF5's, and the chunk index)"), ("times", "steps and times")):
            lines.append(f"  {label:50s} {op[what]['requests']:5d} requests {op[what]['bytes'] / 1e6:9.2f} MB")
        op = op["metadata"]
    for name, p in c["patterns"].items():
        lines.append(f"  {name:50s} {p['requests']:5d} requests {p['bytes'] / 1e6:9.2f} MB "
                     f"({p['bytes'] / max(1, p['asked']):.2f}x asked)")
    fix = shlex.quote(os.path.basename(path.rstrip("/")) or path)
    stem = os.path.splitext(fix)[0]
    if op and op["requests"] > 1:
        lines.append(f"  note: HDF5's metadata is spread over {op['requests']} blocks, up to byte "
                     f"{op['last_byte']:,}: `trajscale rechunk {fix} -o {stem}.remote.h5md --layout remote` "
                     "gathers it at the file's start (one request)")
    cb = c.get("chunk_bytes")
    one = c["patterns"].get("one frame")
    if cb and cb[1] < REMOTE_MIN_CHUNK_BYTES and facts.get("file_bytes", 0) > 64 * REMOTE_MIN_CHUNK_BYTES and \
            facts.get("compression", "none") != "none":
        lines.append(f"  note: compressed chunks of {cb[1] / 1e6:.2f} MB cost a request each: "
                     f"`--layout remote` plans 1-16 MiB chunks")
    elif one and one["requests"] > 1 and facts.get("compression", "none") == "none" and cb and cb[1] < 1e5:
        lines.append("  note: a frame split over many small chunks costs a request each: "
                     "`--layout remote` keeps whole frames in 1-16 MiB chunks")
    return lines


def file_remote_costs(path: str | os.PathLike, group: str | None = None, assume_units: str | None = None,
                      atoms: dict | None = None, fileobj=None, size: int | None = None, **reader) -> dict:
    """:func:`remote_costs` of the file at ``path`` (or ``fileobj``); ``reader`` overrides the reader's settings."""
    own = fileobj is None
    if own:
        size = os.path.getsize(path)
        fileobj = open(path, "rb")   # noqa: SIM115 - closed below
    try:
        f = open_h5(path) if own else h5py.File(fileobj, "r")
        with f:
            info = describe(f, group, assume_units)
            return remote_costs(f, info, fileobj, size, atoms, **reader)
    finally:
        if own:
            fileobj.close()
