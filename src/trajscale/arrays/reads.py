"""How an array's frames and atoms are read: a picklable opener over the process's cached Source.

A :class:`SourceOpener` holds how to open a trajectory (its Source's ``get_config()``, plain
values), never an open handle, as xarray's ``CachingFileManager`` holds a file's opener: pickled
into a Dask graph it travels to a worker, which opens the Source there once
(:func:`trajscale.executors.base.cached_source`, the one process-wide cache of open sources,
which reopens a file replaced since) and reads it under a per-source lock (a Dask worker runs
tasks in several threads; an XTC reader's file position is one per handle).

:func:`read_rows` turns one outer index (an int, a positive-step slice or a sorted integer
array per dimension, as xarray's ``explicit_indexing_adapter`` hands it down) into
``Source.read(start, stop, atoms, stride)`` calls: only the selected atoms' runs are read.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import numpy as np

from ..block import FIELD_ATTRS

#: Per-frame quantities read beside the per-atom fields, by the Block attribute that holds them.
FRAME_QUANTITIES = ("box", "time", "step")

_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


@dataclass(frozen=True)
class SourceOpener:
    """How to open one trajectory: a Source config as JSON text (hashable, small, picklable)."""

    config_json: str

    @classmethod
    def of(cls, config: dict) -> SourceOpener:
        return cls(json.dumps(config, sort_keys=True))

    @property
    def config(self) -> dict:
        return json.loads(self.config_json)

    def source(self):
        """The process's open Source for this config (opened here on first use)."""
        from ..executors.base import cached_source

        return cached_source(self.config)[0]

    def lock(self) -> threading.Lock:
        with _LOCKS_GUARD:
            return _LOCKS.setdefault(self.config_json, threading.Lock())

    @property
    def bytes_read(self) -> int:
        """Bytes this process's Source for the config has read from storage so far."""
        return int(self.source().bytes_read)


def frame_runs(key, n_frames: int) -> list[tuple[int, int, int]]:
    """``(start, stop, stride)`` reads that give the frames of ``key`` in order (an int, a slice, or a
    sorted integer array: one read when evenly spaced, else one per run of consecutive frames)."""
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
    """The atoms to read for ``key`` (None: all) and the take that orders the read rows as asked
    (None: as read). Duplicates are read once."""
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
              subset: np.ndarray | None = None) -> np.ndarray:
    """The values of variable ``name`` (a field: position, velocity, force; or box, time, step) at
    the outer index ``key``, as a fresh array (the Source's buffers are never handed out).

    ``subset``: the trajectory's atoms the variable's ``atom`` axis holds (sorted; None: all).
    A per-frame quantity comes with a read of one atom (a Block always holds positions)."""
    runs = frame_runs(key[0], shape[0])
    per_atom = name in FIELD_ATTRS
    atoms, order = atom_request(key[1], shape[1]) if per_atom else (np.zeros(1, np.intp), None)
    if per_atom and subset is not None:
        atoms = subset if atoms is None else subset[atoms]
    n_rows = sum(len(range(*r)) for r in runs)
    width = (shape[1] if atoms is None else len(atoms)) if per_atom else 0
    out = np.empty((n_rows, width, 3) if per_atom else (n_rows, *shape[1:]), dtype)
    if n_rows:
        with opener.lock():
            src = opener.source()
            row = 0
            for start, stop, stride in runs:
                blk = src.read(start, stop, atoms, fields=_fields(name), stride=stride)
                got = getattr(blk, FIELD_ATTRS.get(name, name))
                out[row:row + len(got)] = got
                row += len(got)
    if order is not None:
        out = out[:, order]
    drop = (0 if _is_int(key[0]) else slice(None),)
    if per_atom:
        drop += (0 if _is_int(key[1]) else slice(None),)
    out = out[drop]
    rest = key[2:] if per_atom else key[1:]
    return out[..., rest[0]] if rest and not _whole(rest[0]) else out


def _fields(name: str) -> tuple[str, ...]:
    """The fields a read of ``name`` asks for: a Block always holds positions, so velocities and forces
    come with the same atoms' positions (a per-frame quantity with those of one atom)."""
    return ("position", name) if name in ("velocity", "force") else ("position",)


def _is_int(k) -> bool:
    return isinstance(k, (int, np.integer))


def _whole(k) -> bool:
    return isinstance(k, slice) and k == slice(None)
