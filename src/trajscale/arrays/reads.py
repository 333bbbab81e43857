"""How an array's frames and atoms are read: a picklable opener over the process's cached Source.

A :class:`SourceOpener` holds how to open a trajectory, never an open handle, as xarray's ``CachingFileManager``
does. Every read adds its bytes to one counter per trajectory in the process, under a lock: Dask's threads read
through Sources of their own, which no thread-local count sees.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import numpy as np

from ..block import FIELD_ATTRS
from ..storage import redacted

#: Bytes read per Source config (JSON) in this process, by every thread; guarded by ``_COUNT_LOCK``.
_BYTES: dict[str, int] = {}
_COUNT_LOCK = threading.Lock()


def count_bytes(config_json: str, n: int) -> None:
    """Add ``n`` bytes read for the trajectory ``config_json`` to the process's count (any thread)."""
    if n:
        with _COUNT_LOCK:
            _BYTES[config_json] = _BYTES.get(config_json, 0) + int(n)


def bytes_read(config_json: str) -> int:
    """Bytes read for the trajectory ``config_json`` in this process so far, by every thread."""
    with _COUNT_LOCK:
        return _BYTES.get(config_json, 0)


@dataclass(frozen=True)
class SourceOpener:
    """How to open one trajectory: a Source config as JSON text (hashable, small, picklable)."""

    config_json: str

    def __repr__(self) -> str:   # a storage option may be a credential; Dask logs a failed task's repr
        return f"SourceOpener({json.dumps(redacted(self.config), sort_keys=True)!r})"

    @classmethod
    def of(cls, config: dict) -> SourceOpener:
        return cls(json.dumps(config, sort_keys=True))

    @property
    def config(self) -> dict:
        return json.loads(self.config_json)

    def source(self):
        """This thread's open Source for this config (opened here on first use)."""
        from ..executors.base import cached_source

        return cached_source(self.config)[0]

    @property
    def bytes_read(self) -> int:
        """Bytes read from storage for this config in this process so far, by every thread."""
        return bytes_read(self.config_json)


def frame_runs(key, n_frames: int) -> list[tuple[int, int, int]]:
    """``(start, stop, stride)`` reads giving ``key``'s frames in order (one if evenly spaced, else one per run)."""
    if isinstance(key, (int, np.integer)):
        k = int(key)
        return [(k, k + 1, 1)]
    if isinstance(key, slice):
        start, stop, step = key.indices(n_frames)
        return [(start, stop, step)] if len(range(start, stop, step)) else []
    frames = np.asarray(key, dtype=np.int64)
    if not len(frames):
        return []
    steps = np.diff(frames)
    if len(frames) == 1 or (steps[0] > 0 and np.all(steps == steps[0])):
        step = int(steps[0]) if len(steps) else 1
        return [(int(frames[0]), int(frames[-1]) + 1, step)]
    cut = np.flatnonzero(steps != 1) + 1
    return [(int(run[0]), int(run[-1]) + 1, 1) for run in np.split(frames, cut)]


def atom_request(key, n_atoms: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The atoms to read for ``key`` (None: all) and the take ordering the rows as asked; duplicates read once."""
    if isinstance(key, (int, np.integer)):
        return np.array([int(key)], np.intp), None
    if isinstance(key, slice):
        start, stop, step = key.indices(n_atoms)
        if (start, stop, step) == (0, n_atoms, 1):
            return None, None
        return np.arange(start, stop, step, dtype=np.intp), None
    atoms = np.asarray(key, dtype=np.intp)
    unique, inverse = np.unique(atoms, return_inverse=True)
    if len(unique) == len(atoms) and np.array_equal(unique, atoms):
        return atoms, None
    return unique, inverse


def read_rows(opener: SourceOpener, name: str, key: tuple, shape: tuple[int, ...], dtype,
              subset: np.ndarray | None = None, time_decimals: int = 0) -> np.ndarray:
    """Variable ``name`` at the outer index ``key``, a fresh array; ``subset``: the ``atom`` axis's atoms (sorted)."""
    runs = frame_runs(key[0], shape[0])
    per_atom = name in FIELD_ATTRS
    atoms, order = atom_request(key[1], shape[1]) if per_atom else (np.zeros(1, np.intp), None)
    if per_atom and subset is not None:
        atoms = subset if atoms is None else subset[atoms]
    n_rows = sum(len(range(*r)) for r in runs)
    width = (shape[1] if atoms is None else len(atoms)) if per_atom else 0
    out = np.empty((n_rows, width, 3) if per_atom else (n_rows, *shape[1:]), dtype)
    if n_rows:
        src = opener.source()   # this thread's own: no other thread reads through it
        before = int(src.bytes_read)
        try:
            row = 0
            for start, stop, stride in runs:
                blk = src.read(start, stop, atoms, fields=_fields(name), stride=stride)
                got = getattr(blk, FIELD_ATTRS.get(name, name))
                out[row:row + len(got)] = got
                row += len(got)
        finally:
            count_bytes(opener.config_json, int(src.bytes_read) - before)
    if name == "time":
        out = tidy_times(out, time_decimals)
    if order is not None:
        out = out[:, order]
    drop = (0 if _is_int(key[0]) else slice(None),)
    if per_atom:
        drop += (0 if _is_int(key[1]) else slice(None),)
    out = out[drop]
    rest = key[2:] if per_atom else key[1:]
    return out[..., rest[0]] if rest and not _whole(rest[0]) else out


def tidy_times(times: np.ndarray, min_decimals: int = 0) -> np.ndarray:
    """Times (ps, float64) without float32's noise, so ``ds.sel(time=400)`` finds the frame written at 400 ps:
    each is rounded to the power of ten at or above eight float32 steps at its size, when that moves it by at
    most four (``400.00003`` -> ``400.0``), keeping at least ``min_decimals`` and never past whole ps."""
    t = np.asarray(times, np.float64)
    finite = np.isfinite(t) & (t != 0) & (np.abs(t) < 1e30)
    if not finite.any():
        return t
    ulp = np.spacing(np.abs(t[finite]).astype(np.float32)).astype(np.float64)
    decimals = np.clip(np.maximum(-np.ceil(np.log10(8 * ulp)), min_decimals), 0, 15).astype(int)
    rounded = np.empty_like(ulp)
    for d in np.unique(decimals):   # numpy's round divides by an exact power of ten: the nearest double
        pick = decimals == d
        rounded[pick] = np.round(t[finite][pick], int(d))
    out = t.copy()
    out[finite] = np.where(np.abs(rounded - t[finite]) <= 4 * ulp, rounded, t[finite])
    return out


def _fields(name: str) -> tuple[str, ...]:
    """The fields a read of ``name`` asks for (a Block always holds positions; per-frame ones: of one atom)."""
    return ("position", name) if name in ("velocity", "force") else ("position",)


def _is_int(k) -> bool:
    return isinstance(k, (int, np.integer))


def _whole(k) -> bool:
    return isinstance(k, slice) and k == slice(None)
