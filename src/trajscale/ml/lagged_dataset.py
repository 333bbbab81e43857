"""Time-lagged pairs as PyTorch datasets: for VAMPnets and other models of transitions.

A sample is a pair ``(x_t, x_{t+τ})`` of one trajectory (never spanning two or a gap), numbered so that
consecutive samples are consecutive frames: a :class:`~trajscale.ml.sampler.BlockBatchSampler` batch is read as
a few contiguous runs. :class:`LaggedDataset` serves features held in memory; :class:`LaggedEnsembleDataset`
an ensemble's coordinates, packed as :class:`~trajscale.ml.ensemble.EnsembleDataset` packs them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import ConfigError
from .dataset import _as_index, _BatchReads
from .ensemble import EnsembleDataset, _label_columns, _labels_of, _reordered
from .lagged import _lag, pairs_of, trajectories


class LaggedDataset(_BatchReads):
    """Time-lagged pairs of features held in memory, as a map-style dataset.

    Parameters
    ----------
    features
        Per-trajectory features (:func:`~trajscale.ml.lagged.trajectories`: a list of (frames, features)
        arrays, an ensemble's per-frame result, ...); held in memory, as float32 unless ``dtype`` says.
    lagtime
        Frames between ``x`` and ``y``.
    dtype
        The features' type in the samples.
    transform
        Called on each item (a whole batch for a batch read).
    """

    def __init__(self, features, lagtime: int, *, dtype=np.float32, transform: Callable | None = None) -> None:
        self.lagtime = _lag(lagtime)
        self.transform = transform
        values, rows, member, frames, times, names, labels = [], [], [], [], [], [], []
        offset = 0
        for i, traj in enumerate(trajectories(features)):
            t, _ = pairs_of(traj, self.lagtime)
            values.append(np.asarray(traj.values, dtype))
            rows.append(t + offset)
            member.append(np.full(len(t), i, np.int64))
            frames.append(t)
            times.append(traj.times if traj.times is not None else np.full(len(traj.values), np.nan))
            names.append(traj.name)
            labels.append(dict(traj.labels))
            offset += len(traj.values)
        self._data = np.concatenate(values)
        self._times = np.concatenate(times).astype(np.float64)
        self._rows = np.concatenate(rows)
        self._member = np.concatenate(member)
        self._frame = np.concatenate(frames)
        self.names = tuple(names)
        self.labels = _label_columns(labels)

    def __len__(self) -> int:
        return len(self._rows)

    def read(self, index) -> dict:
        """The pairs ``index`` (an int or a sequence), without the transform."""
        scalar = np.ndim(index) == 0
        idx = _as_index(index, len(self))
        rows, member = self._rows[idx], self._member[idx]
        out = {"x": self._data[rows], "y": self._data[rows + self.lagtime], "trajectory": member,
               "name": [self.names[m] for m in member.tolist()], "frame": self._frame[idx],
               "time": self._times[rows], "time_lagged": self._times[rows + self.lagtime]}
        out.update(_labels_of(self.labels, member))
        return {k: v[0] for k, v in out.items()} if scalar else out


class LaggedEnsembleDataset(EnsembleDataset):
    """Time-lagged pairs of an ensemble's coordinates (or velocities, forces), as a map-style dataset.

    Parameters
    ----------
    trajectories
        What :class:`~trajscale.ml.ensemble.EnsembleDataset` takes: an Ensemble, a catalog, a glob
        (``"data/mdcath_dataset_*.h5"``, local or behind a URL), or a list of Members or locations.
    lagtime
        Frames between ``x`` and ``y``.
    field
        The per-atom field of ``x`` and ``y``: ``position``, ``velocity`` or ``force``.
    atomic_numbers, max_open, cache_dir, storage_options, transform, check_frames
        As :class:`~trajscale.ml.ensemble.EnsembleDataset` takes them.

    A pair never spans two runs of regularly spaced frames: where a member's time step differs from its usual
    one (a dropped frame, a pause between parts), it is cut as :func:`~trajscale.ml.lagged.lagged_pairs` cuts
    a run's features (:func:`~trajscale.ml.lagged.piece_bounds`).
    """

    def __init__(self, trajectories, lagtime: int, *, field: str = "position", atomic_numbers: bool = False,
                 max_open: int = 16, cache_dir=None, storage_options: dict | None = None,
                 transform: Callable | None = None, check_frames: bool = True) -> None:
        super().__init__(trajectories, (field,), atomic_numbers=atomic_numbers, max_open=max_open,
                         cache_dir=cache_dir, storage_options=storage_options, transform=transform,
                         check_frames=check_frames)
        self.lagtime = _lag(lagtime)
        self.field = field
        firsts, counts = [], []
        for i, m in enumerate(self.members):
            bounds = np.array([0, *m.breaks, m.n_frames], np.int64)
            a, b = bounds[:-1], bounds[1:] - self.lagtime
            keep = b > a
            firsts.append(a[keep] + self.starts[i])
            counts.append((b - a)[keep])
        #: each piece's first frame (in the dataset's numbering of frames) and its pairs
        self._piece_first = np.concatenate(firsts)
        self._piece_start = np.r_[0, np.cumsum(np.concatenate(counts))].astype(np.int64)
        self.n_pairs = int(self._piece_start[-1])

    def __len__(self) -> int:
        return self.n_pairs

    def _frames_of(self, idx: np.ndarray) -> np.ndarray:
        piece = np.searchsorted(self._piece_start, idx, side="right") - 1
        return self._piece_first[piece] + (idx - self._piece_start[piece])

    def read(self, index) -> dict:
        """The pairs ``index`` (an int or a sequence), without the transform: pairs in increasing order are
        read straight into ``x`` and ``y`` (:meth:`_packed`), any other order read together, then reordered."""
        scalar = np.ndim(index) == 0
        idx = _as_index(index, self.n_pairs)
        g = self._frames_of(idx)
        shared = not self.transform   # (x and y are what a DataLoader worker hands back: in shared memory)
        if len(g) and (len(g) == 1 or bool((np.diff(g) > 0).all())):
            x = self._packed(g, shared, (self.lagtime, self.field))
            out = {"x": x.pop(self.field), "y": x.pop("lagged"), "time_lagged": x.pop("time_lagged"), **x}
        else:
            union = np.union1d(g, g + self.lagtime)
            frames = self._packed(union, shared=False)
            per_atom = (self.field, *(("z",) if self.atomic_numbers else ()))
            x = _reordered(frames, np.searchsorted(union, g), per_atom, shared=shared)
            y = _reordered(frames, np.searchsorted(union, g + self.lagtime), per_atom, (self.field, "time"), shared)
            out = {"x": x.pop(self.field), "y": y[self.field], "time_lagged": y["time"], **x}
        if scalar:
            return {k: (v if k in ("x", "y", "z") else v[0]) for k, v in out.items()}
        return out

    def pairs(self, index=None) -> tuple[np.ndarray, np.ndarray]:
        """The pairs ``index`` (default: all) as deeptime's ``(X, Y)``: (pairs, atoms x 3) float32 arrays of
        the members' coordinates (or the field asked for), for members of one atom count (``TICA(lagtime=τ)
        .fit((X, Y))``). Memory: every pair twice; iterate over blocks of ``index`` to keep less.

        Raises
        ------
        ConfigError
            The pairs' members have different atom counts (their coordinates are no one feature space).
        """
        batch = self.read(np.arange(self.n_pairs) if index is None else np.atleast_1d(index))
        counts = np.unique(batch["n_atoms"])
        if len(counts) > 1:
            raise ConfigError(f"the pairs' members have {', '.join(map(str, counts))} atoms: (X, Y) arrays take "
                              "members of one atom count")
        n = len(batch["n_atoms"])
        return batch["x"].reshape(n, -1), batch["y"].reshape(n, -1)

    def _per_atom_keys(self) -> set[str]:
        return {"x", "y", "z"}


__all__ = ["LaggedDataset", "LaggedEnsembleDataset"]
