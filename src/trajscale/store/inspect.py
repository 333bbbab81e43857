"""Describe an H5MD file's layout and what each access pattern costs on it.

Read amplification = bytes HDF5 must read and decompress / bytes requested,
computed from the chunk geometry: a chunk is the unit of I/O and of
decompression, so touching one element costs the whole chunk.  (trajscale
reads uncompressed chunks around HDF5's chunk cache, which lets it fetch only
the selected atoms; compressed chunks are always decoded whole.)
"""

from __future__ import annotations

import math
import os

import h5py

from .h5md import H5MDInfo, describe, open_h5

PATTERNS = {
    "one frame": (1, None),
    "block of 100 frames": (100, None),
    "150-atom subset, 100 frames": (100, 150),
}


def amplification(shape: tuple[int, int, int], chunks: tuple[int, ...] | None,
                  n_frames: int, n_atoms: int | None) -> float:
    """Chunk-granular read amplification of reading ``n_frames`` x ``n_atoms`` (aligned at 0)."""
    f_total, a_total, _ = shape
    n_frames = max(1, min(n_frames, f_total))
    n_atoms = a_total if n_atoms is None else max(1, min(n_atoms, a_total))
    if not chunks:
        return 1.0
    cf, ca = chunks[0], chunks[1]
    # edge chunks are stored (and decoded) at full size, so no clamping to the dataset
    frames_read = math.ceil(n_frames / cf) * cf
    atoms_read = math.ceil(n_atoms / ca) * ca
    comp_read = math.ceil(3 / chunks[2]) * chunks[2]
    return (frames_read * atoms_read * comp_read) / (n_frames * n_atoms * 3)


def layout_facts(info: H5MDInfo) -> dict:
    """Layout summary of a described H5MD group (for ``inspect`` and run reports)."""
    shape = (info.n_frames, info.n_atoms, 3)
    amp = {name: round(amplification(shape, info.chunks, f, a), 2) for name, (f, a) in PATTERNS.items()}
    comp = info.compression or "none"
    if info.compression_opts is not None and info.compression:
        comp += f":{info.compression_opts}"
    facts = {
        "format": "h5md", "path": info.path, "group": info.group,
        "n_frames": info.n_frames, "n_atoms": info.n_atoms, "fields": list(info.fields),
        "units": dict(info.units), "dtype": info.dtype,
        "chunks": list(info.chunks) if info.chunks else "contiguous",
        "compression": comp, "read_amplification": amp,
    }
    if os.path.exists(info.path):
        facts["file_bytes"] = os.path.getsize(info.path)
    facts["warnings"] = layout_warnings(info, amp)
    return facts


def layout_warnings(info: H5MDInfo, amp: dict) -> list[str]:
    """Plain-language warnings about layouts that fight the access pattern."""
    out = []
    ch = info.chunks
    if ch and ch[0] > 1 and ch[1] < info.n_atoms:
        n_split = math.ceil(info.n_atoms / ch[1])
        out.append(
            f"chunks {tuple(ch)} mix {ch[0]} frames and split each frame's atoms over {n_split} chunks "
            f"(h5py's automatic chunking, the seed paper's slow file): reading one frame costs "
            f"{amp['one frame']:.0f}x its size and touches {n_split} chunks. Fix: trajscale convert "
            f"TOPOLOGY {os.path.basename(info.path)} -o fixed.h5md --chunks auto")
    elif ch and amp["one frame"] > 8:
        out.append(f"chunks hold {ch[0]} frames: a single-frame read costs {amp['one frame']:.0f}x its size; "
                   f"fine for block reads, slow for random access (--chunks frame fixes it)")
    if ch and ch[1] < info.n_atoms and ch[0] == 1:
        out.append(f"chunks split each frame into {math.ceil(info.n_atoms / ch[1])} pieces: block reads "
                   f"make many small I/O requests; --chunks auto keeps a frame's atoms together")
    return out


def inspect_file(path: str | os.PathLike, group: str | None = None) -> dict:
    """Everything ``trajscale inspect`` prints, as a dict."""
    with open_h5(path) as f:
        info = describe(f, group)
        facts = layout_facts(info)
        facts["groups"] = sorted(f["particles"].keys())
        facts["observables"] = list(info.observables)
        h5md = f.get("h5md")
        if h5md is not None:
            facts["h5md_version"] = [int(v) for v in h5md.attrs.get("version", [])]
            creator = h5md.get("creator")
            if isinstance(creator, h5py.Group):
                facts["creator"] = f"{creator.attrs.get('name', '')} {creator.attrs.get('version', '')}".strip()
        facts["boundary"] = list(info.boundary)
    return facts
