"""Pack many small sample files (NPZ / .npy) into one HDF5 store.

Devarajan, HUG 2024 (MuMMI): a loader over 600 NPZ files spent its run in NumPy's many small reads and
metadata calls; the same samples packed into one HDF5 file read many times faster.  The store holds one
dataset per key, samples along axis 0, in input order, and an index of where each sample came from::

    /<key>            (n_samples, *sample_shape)   one per key, contiguous by default
    /index/file       (n_samples,) int32           position of the source file in /index/files
    /index/sample     (n_samples,) int64           sample number inside that file
    /index/files      (n_files,) str               source file paths, in order
    /index/done       (n_files,) bool              files copied (for --resume)
    /index/stat       (n_files, 2) int64           their size and mtime (ns) when copied

Only headers are read to plan the store, so mismatched shapes or dtypes are reported before anything is
written.  The store is written under ``.NAME.partial`` and renamed when every file is in and the counts
check out; ``resume=True`` continues an interrupted pack planned from the same inputs.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from ..errors import ConfigError, InputFileError, OutputError
from ..progress import progress_bar
from ..util import check_input_file, check_output_path, fsync_path, polling_for_stop, raise_if_stopped

log = logging.getLogger(__name__)

#: Key under which a .npy file's array is stored (``np.savez(f, x)`` names it so too).
NPY_KEY = "arr_0"
PACK_FORMAT = "trajscale-pack-1"
#: ``chunks="auto"``: samples per chunk for about this many bytes.
AUTO_CHUNK_BYTES = 4 * 1024**2


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """Shape and dtype of one array in one input file, from its header."""

    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True, slots=True)
class PackPlan:
    """What goes where: the inputs, their sample counts and each key's sample shape and dtype."""

    files: tuple[str, ...]
    counts: tuple[int, ...]
    keys: tuple[str, ...]
    shapes: dict
    dtypes: dict

    @property
    def n_samples(self) -> int:
        return int(sum(self.counts))

    def fingerprint(self) -> str:
        """The plan as JSON: a resumed pack must have been planned the same way."""
        return json.dumps({"files": list(self.files), "counts": list(self.counts),
                           "keys": list(self.keys), "shapes": {k: list(v) for k, v in self.shapes.items()},
                           "dtypes": {k: self.dtypes[k].str for k in self.keys}})


@dataclass(frozen=True, slots=True)
class PackSummary:
    """What :func:`pack` wrote: the store, its input files, samples and keys, bytes, and files resumed."""

    output: str
    n_files: int
    n_samples: int
    keys: tuple[str, ...]
    bytes_written: int
    resumed_files: int
    seconds: float


# ---------------------------------------------------------------- reading inputs

def _npy_header(fh) -> ArraySpec:
    fmt = np.lib.format
    read = fmt.read_array_header_1_0 if fmt.read_magic(fh) == (1, 0) else fmt.read_array_header_2_0
    shape, _, dtype = read(fh)
    return ArraySpec(tuple(shape), np.dtype(dtype))


def read_specs(path: str) -> dict[str, ArraySpec]:
    """Key -> shape and dtype of every array in an NPZ or .npy file, from headers only."""
    check_input_file(path)
    try:
        if zipfile.is_zipfile(path):
            out = {}
            with zipfile.ZipFile(path) as zf:
                for name in zf.namelist():
                    if name.endswith(".npy"):
                        with zf.open(name) as fh:
                            out[name[:-4]] = _npy_header(fh)
            if not out:
                raise InputFileError(path, "NPZ file holds no arrays")
            return out
        with open(path, "rb") as fh:
            spec = _npy_header(fh)
        expected = spec.dtype.itemsize * int(np.prod(spec.shape))
        if os.path.getsize(path) < expected:
            raise InputFileError(path, f"truncated: {spec.shape} {spec.dtype} needs {expected} bytes of data")
        return {NPY_KEY: spec}
    except InputFileError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputFileError(path, f"not a readable NPZ or .npy file ({exc})") from None


def read_arrays(path: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays ``keys`` of one input file (an NPZ member or a .npy file)."""
    check_input_file(path)
    try:
        if not zipfile.is_zipfile(path):
            return {NPY_KEY: np.load(path, allow_pickle=False)}
        with np.load(path, allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in keys}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, KeyError) as exc:
        raise InputFileError(path, f"cannot read its arrays ({exc})") from None


def _read_job(args: tuple[int, str, tuple[str, ...]]) -> tuple[int, dict[str, np.ndarray]]:
    i, path, keys = args
    return i, read_arrays(path, keys)


def plan_pack(samples: Iterable[str | os.PathLike], keys: Sequence[str] | None = None) -> PackPlan:
    """Read every input's headers and check that they stack.

    Raises
    ------
    InputFileError
        Naming the file and the key, if a file lacks a key, a key's sample shape or dtype differs from the
        first file's, or a file's keys disagree on the number of samples.
    """
    files = [str(s) for s in samples]
    if not files:
        raise ConfigError("no sample files given")
    first_specs = read_specs(files[0])
    keys = tuple(keys) if keys else tuple(sorted(first_specs))
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, np.dtype] = {}
    counts = []
    for path in files:
        specs = first_specs if path == files[0] else read_specs(path)
        n = None
        for k in keys:
            if k not in specs:
                raise InputFileError(path, f"has no key {k!r} (it has {', '.join(sorted(specs))})")
            s = specs[k]
            if not s.shape:
                raise InputFileError(path, f"key {k!r} is a scalar; samples must lie along axis 0")
            if k not in shapes:
                shapes[k], dtypes[k] = s.shape[1:], s.dtype
            elif s.shape[1:] != shapes[k] or s.dtype != dtypes[k]:
                raise InputFileError(path, f"key {k!r} has samples of shape {s.shape[1:]} {s.dtype}, "
                                           f"but {files[0]} has {shapes[k]} {dtypes[k]}")
            if n is None:
                n = s.shape[0]
            elif s.shape[0] != n:
                raise InputFileError(path, f"key {k!r} has {s.shape[0]} samples but key {keys[0]!r} has {n}")
        counts.append(int(n))
    return PackPlan(tuple(files), tuple(counts), keys, shapes, dtypes)


# ---------------------------------------------------------------- writing the store

def partial_name(output: str | os.PathLike) -> Path:
    """The fixed temporary name an unfinished pack lives under (so that it can be resumed)."""
    p = Path(output)
    return p.with_name(f".{p.name}.partial")


def _chunks(chunks: str | int | None, shape: tuple[int, ...], dtype: np.dtype, compression) -> tuple | None:
    if chunks in (None, "contiguous") and not compression:
        return None
    sample_bytes = max(1, dtype.itemsize * int(np.prod(shape[1:])))
    if chunks in (None, "contiguous", "auto"):
        per = max(1, AUTO_CHUNK_BYTES // sample_bytes)
    else:
        try:
            per = int(chunks)
        except ValueError:
            raise ConfigError(f"--chunks must be contiguous, auto or a number of samples, not {chunks!r}") from None
        if per < 1:
            raise ConfigError(f"--chunks must be at least 1 sample, not {per}")
    return (min(per, max(1, shape[0])), *shape[1:])


def _compression(spec: str | None) -> dict:
    if not spec or spec == "none":
        return {}
    name, _, level = spec.partition(":")
    if name == "gzip":
        return {"compression": "gzip", "compression_opts": int(level or 4)}
    if name == "lzf" and not level:
        return {"compression": "lzf"}
    raise ConfigError(f"--compression must be none, gzip[:1-9] or lzf, not {spec!r}")


def _create(path: Path, plan: PackPlan, chunks, compression: str | None) -> None:
    comp = _compression(compression)
    with h5py.File(path, "w") as f:
        f.attrs["format"] = PACK_FORMAT
        f.attrs["plan"] = _fingerprint(plan, chunks, compression)
        f.attrs["n_samples"] = plan.n_samples
        for k in plan.keys:
            shape = (plan.n_samples, *plan.shapes[k])
            f.create_dataset(k, shape=shape, dtype=plan.dtypes[k],
                             chunks=_chunks(chunks, shape, plan.dtypes[k], comp), **comp)
        idx = f.create_group("index")
        counts = np.asarray(plan.counts, np.int64)
        idx["file"] = np.repeat(np.arange(len(plan.files), dtype=np.int32), counts)
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        idx["sample"] = np.arange(plan.n_samples, dtype=np.int64) - starts
        idx.create_dataset("files", data=np.array(plan.files, dtype=object), dtype=h5py.string_dtype())
        idx["done"] = np.zeros(len(plan.files), dtype=bool)
        idx["stat"] = np.zeros((len(plan.files), 2), dtype=np.int64)   # size, mtime_ns when packed


def _fingerprint(plan: PackPlan, chunks, compression) -> str:
    return json.dumps({"plan": json.loads(plan.fingerprint()), "chunks": str(chunks),
                       "compression": str(compression or "none")})


def _open_partial(path: Path, fingerprint: str) -> h5py.File:
    try:
        f = h5py.File(path, "r+")
    except OSError as exc:
        raise InputFileError(path, f"unfinished pack cannot be reopened ({exc}); delete it and pack again") from None
    if f.attrs.get("format") != PACK_FORMAT or f.attrs.get("plan") != fingerprint:
        f.close()
        raise InputFileError(path, "unfinished pack was made from other inputs or options; "
                                   "delete it or pack without --resume")
    return f


def _pick(executor: str, n_workers: int, plan: PackPlan, n_files: int) -> str:
    """``executor``, or for ``auto`` its choice (``run``'s rule) for copying ``n_files`` of the plan's files."""
    from ..executor_registry import WorkSize, choose, executor_traits, home_names

    allowed = home_names()
    if executor not in allowed:
        executor_traits(executor)   # an unknown name: one error listing the registered ones
        raise ConfigError(f"pack reads on the executors {', '.join(allowed)} (one process writes the store), "
                          f"not {executor!r}")
    per_sample = sum(int(np.prod(plan.shapes[k], dtype=np.int64)) * plan.dtypes[k].itemsize for k in plan.keys)
    share = n_files / max(1, len(plan.files))
    size = WorkSize(max(1, round(plan.n_samples * share)), max(1, -(-per_sample // 12)))   # 12 bytes per atom
    name, why = choose(executor, size, n_workers)
    if name != executor:
        log.info("executor %s: %s", name, why)
    return name


def _read_all(plan: PackPlan, todo: list[int], executor: str, n_workers: int, options: dict, on_file) -> None:
    """``on_file(file number, arrays)`` for each file of ``todo``, as the executor's task runner reads them;
    memory is O(workers x file size), never O(files)."""
    from ..executor_registry import executor_traits, load

    jobs = [(i, os.path.abspath(plan.files[i]), plan.keys) for i in todo]   # workers may run elsewhere (Dask)
    executor = _pick(executor, n_workers, plan, len(jobs))
    runner = load(executor_traits(executor).convert_runner)
    runner(_read_job, [(j,) for j in jobs], max(1, n_workers), lambda _, got: on_file(*got), None,
           options=options, window=2 * max(1, n_workers))


def pack(samples: Iterable[str | os.PathLike], output: str | os.PathLike, keys: Sequence[str] | None = None,
         chunks: str | int | None = "contiguous", compression: str | None = None, executor: str = "serial",
         n_workers: int = 1, resume: bool = False, overwrite: bool = False,
         progress: bool = False, executor_options: dict | None = None) -> PackSummary:
    """Pack NPZ / .npy sample files into one HDF5 store.

    Parameters
    ----------
    samples
        Input files, in order; samples of file i follow those of file i-1.
    output
        The HDF5 store to write.
    keys
        Arrays to pack (default: every array of the first file).
    chunks
        ``"contiguous"`` (default: explicit chunking was 1.8x slower for large reads), ``"auto"`` (~4 MiB
        chunks) or samples per chunk.
    compression
        ``None``, ``"gzip[:level]"`` or ``"lzf"`` (chunked).
    executor, n_workers
        The executor (of the registry's: ``serial``, ``processes``, ``dask``, ``auto``...) that reads
        (and decompresses) the inputs with ``n_workers`` workers; this process writes.
    executor_options
        The executor's own options (``{"scheduler": "tcp://host:8786"}`` for Dask).
    resume
        Continue the unfinished pack of the same inputs.
    overwrite
        Replace an existing output.

    Returns
    -------
    PackSummary
    """
    t0 = time.perf_counter()
    samples = list(samples)
    final = check_output_path(output, overwrite=overwrite, inputs=samples)   # never an input, even with overwrite
    plan = plan_pack(samples, keys)
    tmp = partial_name(final)
    if tmp.exists() and not resume:
        raise OutputError(final, f"an unfinished pack {tmp} exists: continue it with --resume, or delete it")
    if not tmp.exists():
        if resume:
            log.info("no unfinished pack at %s; starting from the beginning", tmp)
        _create(tmp, plan, chunks, compression)
    offsets = np.concatenate([[0], np.cumsum(plan.counts)]).astype(np.int64)
    written = 0
    with _open_partial(tmp, _fingerprint(plan, chunks, compression)) as f:
        done = f["index/done"][()]
        stats = f["index/stat"][()]
        for i in np.flatnonzero(done):
            if tuple(stats[i]) != _stat(plan.files[i]):
                raise InputFileError(plan.files[i], f"changed since the unfinished pack {tmp} copied it; "
                                                    "pack again without --resume")
        todo = [i for i in range(len(plan.files)) if not done[i]]
        resumed = len(plan.files) - len(todo)
        if resumed:
            log.info("resuming %s: %d of %d files already packed", tmp, resumed, len(plan.files))
        bar = progress_bar(len(plan.files), progress, desc="pack", unit="file", initial=resumed, leave=True)
        try:
            def write(i: int, arrays: dict) -> None:
                nonlocal written
                for k in plan.keys:
                    a = arrays[k]
                    if a.shape != (plan.counts[i], *plan.shapes[k]) or a.dtype != plan.dtypes[k]:
                        raise InputFileError(plan.files[i], f"key {k!r} changed since it was planned")
                    f[k][offsets[i]:offsets[i + 1]] = a
                    written += a.nbytes
                f.flush()    # the data is on disk before the file is marked done
                f["index/stat"][i] = _stat(plan.files[i])
                f["index/done"][i] = True
                f.flush()
                log.debug("packed %s (%d/%d)", plan.files[i], i + 1, len(plan.files))
                bar.update()
                raise_if_stopped()

            with polling_for_stop():
                _read_all(plan, todo, executor, n_workers, dict(executor_options or {}), write)
        except BaseException:
            n_done = int(f["index/done"][()].sum())
            log.warning("unfinished pack kept at %s (%d of %d files packed); run again with --resume "
                        "to continue", tmp, n_done, len(plan.files))
            raise
        finally:
            bar.close()
        if not f["index/done"][()].all():   # cannot happen unless the file was edited
            raise OutputError(tmp, "not every input was packed")
    fsync_path(tmp)
    _verify_counts(tmp, plan)
    os.replace(tmp, final)
    fsync_path(final.parent, directory=True)
    return PackSummary(str(final), len(plan.files), plan.n_samples, plan.keys, written, resumed,
                       time.perf_counter() - t0)


def _stat(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _verify_counts(path: Path, plan: PackPlan) -> None:
    """Each dataset holds n_samples rows and the index counts each file's samples."""
    with h5py.File(path, "r") as f:
        for k in plan.keys:
            if f[k].shape[0] != plan.n_samples:
                raise OutputError(path, f"key {k!r} has {f[k].shape[0]} samples, expected {plan.n_samples}")
        counts = np.bincount(f["index/file"][()], minlength=len(plan.files))
        if not np.array_equal(counts, plan.counts):
            raise OutputError(path, "the index does not count each file's samples")


__all__ = ["PackPlan", "PackSummary", "pack", "partial_name", "plan_pack", "read_specs", "NPY_KEY"]
