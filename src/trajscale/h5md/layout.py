"""Dataset layout: parse, plan and inspect chunk shape and compression.

A chunk never splits a frame's atoms and holds 1-4 MiB of frames: per-chunk overhead vanishes, and a one-frame
read does not drag in much more than it asked for. A store read over the network gets chunks of about 8 MiB and
its metadata in one block at the file's start (one range request); it stays plain H5MD.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

TARGET_CHUNK_BYTES = 2 * 1024**2
MAX_CHUNK_BYTES = 4 * 1024**2
#: Most chunk cache the reader gives a dataset whose chunks split frames.
SPLIT_CHUNK_CACHE_MAX = 512 * 1024**2
#: Chunk sizes planned for a store read by range requests: about 8 MiB, 1-16 MiB where the trajectory allows.
REMOTE_TARGET_CHUNK_BYTES = 8 * 1024**2
REMOTE_MAX_CHUNK_BYTES = 16 * 1024**2
REMOTE_MIN_CHUNK_BYTES = 1024**2
#: HDF5's metadata block of a remote store, right after the superblock: with its first 4 KiB the block ends at
#: 256 KiB, the first range request a remote reader makes, holding the metadata of up to a few thousand chunks.
METADATA_BLOCK_BYTES = 252 * 1024
#: What a layout is planned for (``--layout``).
TARGETS = ("disk", "remote")


@dataclass(frozen=True, slots=True)
class Layout:
    """How a time-dependent ``(n_frames, n_atoms, 3)`` dataset is stored.

    Parameters
    ----------
    chunks
        ``"auto"`` (planned from the access pattern), ``"frame"`` (``(1, n_atoms, 3)``), ``"contiguous"``,
        ``"h5py"`` (h5py's own guess, to reproduce slow files) or a number of frames per chunk.
    compression
        ``None``, ``"gzip"`` (level ``compression_opts``), ``"lzf"``, or a filter provided by hdf5plugin:
        ``"zstd"``, ``"lz4"``, ``"blosc-zstd"``, ``"blosc-lz4"`` (see :data:`CODECS`).
    remote
        Plan the store for reading over the network: ``"auto"`` chunks of about 8 MiB and the metadata in one
        block at the file's start (:meth:`file_kwargs`).
    """

    chunks: str | int = "auto"
    compression: str | None = None
    compression_opts: int | None = None
    shuffle: bool = False
    fletcher32: bool = False
    remote: bool = False

    @classmethod
    def parse(cls, chunks: str = "auto", compression: str | None = "none",
              fletcher32: bool = False, target: str = "disk") -> Layout:
        """Build a layout from CLI strings (``"frame"``, ``"gzip:4"``); ``target`` ``"remote"``: for range requests."""
        if target not in TARGETS:
            raise ConfigError(f"--layout must be {' or '.join(TARGETS)}, got {target!r}")
        chunk_spec: str | int = chunks
        if isinstance(chunks, str) and chunks.isdigit():
            chunk_spec = int(chunks)
        if isinstance(chunk_spec, int) and chunk_spec < 1:
            raise ConfigError(f"--chunks must be a positive frame count, got {chunks}")
        if isinstance(chunk_spec, str) and chunk_spec not in ("auto", "frame", "contiguous", "h5py"):
            raise ConfigError(f"--chunks must be auto, frame, contiguous, h5py or a number, got {chunks!r}")
        name, opts = _parse_compression(compression)
        if name and chunk_spec == "contiguous":
            raise ConfigError("compression needs a chunked layout; contiguous data cannot be compressed")
        if target == "remote" and chunk_spec == "h5py":
            raise ConfigError("--layout remote plans its own chunks: give --chunks auto (the default), frame, "
                              "contiguous or a number of frames, not h5py")
        return cls(chunk_spec, name, opts, shuffle=name is not None, fletcher32=fletcher32,
                   remote=target == "remote")

    def chunk_shape(self, n_atoms: int, itemsize: int = 4, n_frames: int | None = None):
        """Chunk shape for a ``(n_frames, n_atoms, 3)`` dataset (None = contiguous, True = h5py)."""
        if self.chunks == "contiguous":
            return None
        if self.chunks == "h5py":
            return True
        if self.chunks == "frame":
            frames = 1
        elif self.chunks == "auto":
            frames = (plan_remote_frames_per_chunk(n_atoms, itemsize) if self.remote
                      else plan_frames_per_chunk(n_atoms, itemsize))
        else:
            frames = int(self.chunks)
        if n_frames:
            frames = max(1, min(frames, n_frames))
            if self.remote and self.chunks == "auto":   # chunks of equal frames: no mostly empty last chunk
                frames = -(-n_frames // -(-n_frames // frames))
        return (frames, n_atoms, 3)

    def h5py_kwargs(self) -> dict:
        """Filter keywords for ``create_dataset``."""
        kw: dict = {}
        if self.compression in PLUGIN_CODECS:
            kw.update(_plugin_filter(self.compression, self.compression_opts))
        elif self.compression:
            kw["compression"] = self.compression
            if self.compression_opts is not None:
                kw["compression_opts"] = self.compression_opts
        if self.shuffle and not (self.compression or "").startswith("blosc"):   # Blosc shuffles inside
            kw["shuffle"] = True
        if self.fletcher32:
            kw["fletcher32"] = True
        return kw

    def file_kwargs(self) -> dict:
        """``h5py.File(..., "w")`` keywords: a remote store's metadata block at the file's start, nothing otherwise."""
        return {"meta_block_size": METADATA_BLOCK_BYTES} if self.remote else {}

    def describe(self) -> str:
        comp = self.compression or "none"
        if self.compression_opts is not None:
            comp += f":{self.compression_opts}"
        return f"chunks={self.chunks} compression={comp}" + (" layout=remote" if self.remote else "")


def plan_frames_per_chunk(n_atoms: int, itemsize: int = 4, target: int = TARGET_CHUNK_BYTES,
                          most: int = MAX_CHUNK_BYTES) -> int:
    """Frames per chunk so a chunk holds whole frames and is about ``target`` bytes (2 MiB), at most ``most``."""
    frame_bytes = max(1, n_atoms * 3 * itemsize)
    frames = max(1, target // frame_bytes)
    while frames > 1 and frames * frame_bytes > most:
        frames -= 1
    return int(frames)


def plan_remote_frames_per_chunk(n_atoms: int, itemsize: int = 4) -> int:
    """Frames per chunk of a store read by range requests: about 8 MiB, at most 16 MiB (a frame is never split)."""
    return plan_frames_per_chunk(n_atoms, itemsize, REMOTE_TARGET_CHUNK_BYTES, REMOTE_MAX_CHUNK_BYTES)


def reader_chunk_cache(shape: tuple[int, ...], chunks: tuple[int, ...] | None, itemsize: int = 4,
                       filtered: bool = False) -> int:
    """Chunk-cache bytes trajscale's reader gives a ``(frames, atoms, 3)`` dataset.

    None (0) while chunks keep each atom's xyz together: every slab touches each chunk once, and an uncompressed
    chunk too big for the cache is read in place, only the selected atoms' bytes. Chunks that split xyz (h5py's
    guess) read in place make every float its own read call, so they get a cache of two rows of chunks;
    ``filtered`` chunks get one row, so several atom runs decode each chunk once."""
    if not chunks or len(shape) != 3:
        return 0
    row = chunks[0] * shape[1] * shape[2] * itemsize   # every chunk of chunks[0] frames
    if chunks[2] != shape[2]:
        return int(min(SPLIT_CHUNK_CACHE_MAX, 2 * row))
    return int(min(SPLIT_CHUNK_CACHE_MAX, row)) if filtered else 0


#: Codec name -> (default level, allowed levels or None, hdf5plugin needed). Blosc byte-shuffles: on
#: coordinates it beat bit-shuffle for every codec measured (benchmarks/codecs.py).
CODECS = {
    "gzip": (4, range(1, 10), False),
    "lzf": (None, None, False),
    "zstd": (3, range(1, 23), True),
    "lz4": (None, None, True),
    "blosc-zstd": (5, range(0, 10), True),
    "blosc-lz4": (5, range(0, 10), True),
}
PLUGIN_CODECS = tuple(name for name, (_, _, plugin) in CODECS.items() if plugin)
#: Older names, kept working.
ALIASES = {"blosc": "blosc-lz4", "blosc_zstd": "blosc-zstd", "blosc_lz4": "blosc-lz4"}


def _parse_compression(spec: str | None) -> tuple[str | None, int | None]:
    if spec is None or spec in ("", "none"):
        return None, None
    name, _, level = spec.partition(":")
    name = ALIASES.get(name, name)
    if name not in CODECS:
        raise ConfigError(f"unknown compression {spec!r}: use none, " + ", ".join(
            f"{n}[:LEVEL]" if CODECS[n][1] else n for n in CODECS))
    default, levels, plugin = CODECS[name]
    if level and levels is None:
        raise ConfigError(f"compression {name} takes no level, got {spec!r}")
    if level and (not level.isdigit() or int(level) not in levels):
        raise ConfigError(f"{name} level must be {levels.start}-{levels.stop - 1}, got {level!r}")
    if plugin:
        try:
            import hdf5plugin  # noqa: F401
        except ImportError:
            raise ConfigError(f"compression {name!r} needs hdf5plugin (pip install hdf5plugin)") from None
    return name, int(level) if level else default


def _plugin_filter(name: str, level: int | None) -> dict:
    import hdf5plugin

    if name == "zstd":
        return dict(hdf5plugin.Zstd(clevel=level or 3))
    if name == "lz4":
        return dict(hdf5plugin.LZ4())
    cname = name.split("-", 1)[1]
    return dict(hdf5plugin.Blosc(cname=cname, clevel=5 if level is None else level,
                                 shuffle=hdf5plugin.Blosc.SHUFFLE))
