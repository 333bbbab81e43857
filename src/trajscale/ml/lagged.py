"""Time-lagged pairs ``(x_t, x_{t+τ})`` of per-trajectory features, for TICA, VAMP and VAMPnets.

A pair across two trajectories, a refused member or a gap is a transition that never happened: a trajectory is
cut where its time step differs from its usual one (the median), and pairs are made within each piece
(:func:`piece_bounds`). Features come one trajectory after another (:func:`trajectories`); :func:`lagged_pairs`
gives deeptime's ``(X, Y)`` in memory, :func:`lagged_chunks` and :func:`frame_chunks` bounded chunks for
``partial_fit`` (:mod:`trajscale.ml.streaming`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import AllRefusedError, ConfigError

#: Bytes of a chunk's rows (a pair's two halves, or a frame) unless its rows are given: its rows are this over
#: a row's bytes, so that a fit's memory does not grow with the feature count (16 MiB: 647 pairs of 1,620
#: float64 features, 262,144 of 4).
CHUNK_BYTES = 16 * 2**20


@dataclass(frozen=True)
class FeatureTrajectory:
    """One trajectory's features ``values`` (frames, features), ``name``, ``labels``, frame ``times`` (ps) or None."""

    name: str
    values: np.ndarray
    labels: Mapping[str, object] = field(default_factory=dict)
    times: np.ndarray | None = None

    def pieces(self) -> np.ndarray:
        """Bounds ``[0, ..., frames]`` of the runs of frames that follow each other (:func:`piece_bounds`)."""
        n = len(self.values)
        return piece_bounds(self.times) if self.times is not None else np.array([0, n], np.int64)


def piece_bounds(times: np.ndarray) -> np.ndarray:
    """Bounds ``[0, b1, ..., n]`` of the runs of frames at the trajectory's step (the median positive step, to
    1e-3 of it and float32 rounding); times that never increase are one run."""
    t = np.asarray(times, np.float64)
    n = len(t)
    if n < 2:
        return np.array([0, n], np.int64)
    dt = np.diff(t)
    positive = dt[dt > 0]
    if positive.size == 0:
        return np.array([0, n], np.int64)
    step = float(np.median(positive))
    tol = 1e-3 * abs(step) + 4 * np.finfo(np.float32).eps * float(np.abs(t).max())   # (float32 times' rounding)
    cuts = np.flatnonzero(np.abs(dt - step) > tol) + 1
    return np.concatenate([[0], cuts, [n]]).astype(np.int64)


def feature_values(result) -> np.ndarray:
    """A per-frame result's values as ``(frames, features)``: each frame's array flattened in its own order
    (φ/ψ as sin/cos: residue after residue, ``sin φ, cos φ, sin ψ, cos ψ``).

    Raises
    ------
    ConfigError
        The result is not per frame, or holds several per-frame arrays (none of them named its values).
    """
    frames = getattr(result, "frames", None)
    if frames is None:
        raise ConfigError(f"a {type(result).__name__} has no frames: time-lagged pairs need a per-frame analysis")
    n = len(frames)
    values = getattr(result, "values", None)
    if not isinstance(values, np.ndarray) and dataclasses.is_dataclass(result):
        arrays = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)
                  if f.name not in ("frames", "times", "report")}
        arrays = {k: v for k, v in arrays.items() if isinstance(v, np.ndarray) and v.ndim and len(v) == n}
        if len(arrays) != 1:
            raise ConfigError(f"a {type(result).__name__} holds {', '.join(arrays) or 'no'} per-frame arrays: "
                              "give the features as arrays, one (frames, features) array per trajectory")
        values = next(iter(arrays.values()))
    return np.asarray(values).reshape(n, -1)


def trajectories(features) -> Iterator[FeatureTrajectory]:
    """The trajectories of ``features`` one at a time, each checked to have as many features as the first.

    Raises
    ------
    ConfigError
        An array that is not 2-D, trajectories with different feature counts (members of different
        residue counts give different φ/ψ counts: one kind of system per estimator), or no trajectory.
    AllRefusedError
        A :class:`FeatureStream` whose every member was refused.
    """
    width = None
    for traj in _trajectories(features):
        if traj.values.ndim != 2:
            raise ConfigError(f"trajectory {traj.name}: features are (frames, features); got shape "
                              f"{traj.values.shape}")
        if width is None:
            width = traj.values.shape[1]
        elif traj.values.shape[1] != width:
            raise ConfigError(f"trajectory {traj.name} has {traj.values.shape[1]} features and the first had "
                              f"{width}: an estimator takes one feature space (members of one residue count)")
        yield traj
    if width is None:   # (no trajectory: each refused member named with its own reason)
        refused = features.refused if isinstance(features, FeatureStream) else []
        if not refused:
            raise ConfigError("no trajectory in the features: nothing to fit or to make pairs of")
        shown = "; ".join(f"{r.member.name}: {r.reason}" for r in refused[:8])
        more = f"; and {len(refused) - 8} more (see .refused)" if len(refused) > 8 else ""
        raise AllRefusedError(features.ensemble.origin or "the ensemble",
                              f"every one of its {len(refused)} trajectories was refused: {shown}{more}", refused)


def _trajectories(features) -> Iterator[FeatureTrajectory]:
    if isinstance(features, FeatureStream):
        yield from features.trajectories()
    elif isinstance(features, np.ndarray):
        yield FeatureTrajectory("0", features)
    elif hasattr(features, "items") and hasattr(features, "analysis"):   # an ensemble's result, read in turn
        for member, result in features.items():
            yield FeatureTrajectory(member.name, feature_values(result), dict(member.labels),
                                    np.asarray(result.times, np.float64))
    elif hasattr(features, "arrays"):
        names = getattr(features, "names", None)
        for i, x in enumerate(features.arrays()):
            yield FeatureTrajectory(names[i] if names else str(i), np.asarray(x))
    else:
        for i, x in enumerate(features):
            if isinstance(x, FeatureTrajectory):
                yield x
            elif hasattr(x, "frames"):   # one trajectory's own result
                yield FeatureTrajectory(str(i), feature_values(x), {}, np.asarray(x.times, np.float64))
            else:
                yield FeatureTrajectory(str(i), np.asarray(x))


def feature_arrays(features) -> Iterator[np.ndarray]:
    """Each trajectory's ``(frames, features)`` array, one at a time."""
    for traj in trajectories(features):
        yield traj.values


def pairs_of(traj: FeatureTrajectory, lagtime: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``t`` and ``t + lagtime`` of every pair within a piece of ``traj`` (frame numbers, in order)."""
    bounds = traj.pieces()
    a, b = bounds[:-1], bounds[1:] - lagtime
    keep = b > a
    counts = (b - a)[keep]
    first = np.repeat(a[keep] - np.r_[0, np.cumsum(counts)[:-1]], counts) + np.arange(int(counts.sum()))
    return first.astype(np.int64), (first + lagtime).astype(np.int64)


def _lag(lagtime) -> int:
    if int(lagtime) != lagtime or int(lagtime) < 1:
        raise ConfigError(f"lagtime is a whole number of frames >= 1 (got {lagtime})")
    return int(lagtime)


def lagged_pairs(features, lagtime: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair ``(x_t, x_{t+lagtime})`` of ``features`` as deeptime's ``(X, Y)`` (pairs, features) arrays,
    for ``TICA(lagtime=τ).fit((X, Y))``.  Memory: every pair twice; :func:`lagged_chunks` keeps a chunk."""
    lag = _lag(lagtime)
    xs, ys = [], []
    for traj in trajectories(features):
        t, u = pairs_of(traj, lag)
        xs.append(traj.values[t])
        ys.append(traj.values[u])
    return np.concatenate(xs), np.concatenate(ys)


def _rebatched(parts: Iterable[tuple[np.ndarray, ...]], rows: int | None) -> Iterator[tuple[np.ndarray, ...]]:
    """Row blocks of ``parts`` regrouped ``rows`` rows at a time (None: :data:`CHUNK_BYTES` of rows)."""
    if rows is not None and int(rows) < 1:
        raise ConfigError(f"chunk rows must be >= 1 (got {rows})")
    held: list[tuple[np.ndarray, ...]] = []
    n_held = 0
    for part in parts:
        if rows is None:
            rows = max(1, CHUNK_BYTES // max(1, sum(c.itemsize * int(np.prod(c.shape[1:])) for c in part)))
        held.append(part)
        n_held += len(part[0])
        while n_held >= rows:
            joined = tuple(np.concatenate(col) for col in zip(*held, strict=True)) if len(held) > 1 else held[0]
            yield tuple(c[:rows] for c in joined)
            rest = tuple(c[rows:] for c in joined)
            n_held -= rows
            held = [rest] if n_held else []
    if n_held:
        yield tuple(np.concatenate(col) for col in zip(*held, strict=True)) if len(held) > 1 else held[0]


def lagged_chunks(features, lagtime: int, rows: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The pairs of :func:`lagged_pairs` in ``(X, Y)`` chunks of ``rows`` pairs (None: :data:`CHUNK_BYTES`
    of pairs), in the same order.  Memory: one trajectory's features and a chunk."""
    lag = _lag(lagtime)

    def per_trajectory():
        for traj in trajectories(features):
            t, u = pairs_of(traj, lag)
            if len(t):
                yield traj.values[t], traj.values[u]

    yield from _rebatched(per_trajectory(), rows)


def frame_chunks(features, rows: int | None = None) -> Iterator[np.ndarray]:
    """Every frame of ``features``, trajectory after trajectory, in chunks of ``rows`` frames (None:
    :data:`CHUNK_BYTES` of frames), for estimators of single frames: k-means, instantaneous covariances."""
    for (x,) in _rebatched(((t.values,) for t in trajectories(features) if len(t.values)), rows):
        yield x


class FeatureStream:
    """An analysis's per-frame features over an ensemble, computed a few members at a time.

    Iterating gives each finished member's ``(frames, features)`` array in the ensemble's order; every pass
    runs the analysis again, ``members_per_run`` members at a time.  Members a pass refuses are left out and
    listed in :attr:`refused`.

    Parameters
    ----------
    analysis
        A per-frame analysis (``ts.Ramachandran(select="protein", sincos=True)``, ``ts.Distances(...)``).
    ensemble
        An :class:`~trajscale.ensemble.Ensemble`, a catalog or a glob (``"mdcath_dataset_*.h5"``).
    members_per_run
        Members run together (on the run's executor, balanced as any ensemble).
    storage_options
        For members behind URLs.
    **run_options
        What ``trajscale.run`` takes for an ensemble (``executor=``, ``n_workers=``, ``step=``, ...).
    """

    def __init__(self, analysis, ensemble, *, members_per_run: int = 32, storage_options: dict | None = None,
                 **run_options) -> None:
        from ..ensemble import Ensemble

        if int(members_per_run) < 1:
            raise ConfigError(f"members_per_run must be >= 1 (got {members_per_run})")
        if "results" in run_options:
            raise ConfigError("a FeatureStream keeps no results folder: run ts.run(analysis, ensemble, "
                              "results=...) once and pass its result instead")
        self.analysis = analysis
        self.ensemble = Ensemble.of(ensemble, storage_options)
        self.members_per_run = int(members_per_run)
        self.storage_options = storage_options
        self.run_options = run_options
        #: the members the last pass refused: ``Refusal`` records (``member``, ``reason``)
        self.refused: list = []

    def __len__(self) -> int:
        """Members in the ensemble (refused ones included)."""
        return len(self.ensemble)

    def __iter__(self) -> Iterator[np.ndarray]:
        return feature_arrays(self)

    def trajectories(self) -> Iterator[FeatureTrajectory]:
        """Each finished member's features, one run of ``members_per_run`` members at a time."""
        from ..ensemble.prepare import Refusal
        from ..ensemble.run import run_ensemble

        self.refused = []
        members = self.ensemble.members
        for a in range(0, len(members), self.members_per_run):
            part = self.ensemble[a:a + self.members_per_run]
            try:
                result = run_ensemble(self.analysis, part, storage_options=self.storage_options,
                                      **self.run_options)
            except AllRefusedError as exc:   # every member of this run refused, each for its own reason
                self.refused += [Refusal(a + r.index, r.member, r.reason) for r in exc.refused]
                continue
            if result is None:   # an MPI rank other than 0
                continue
            self.refused += [Refusal(a + r.index, r.member, r.reason) for r in result.refused]
            for member, r in result.items():
                yield FeatureTrajectory(member.name, feature_values(r), dict(member.labels),
                                        np.asarray(r.times, np.float64))


def stream_transform(features, *models) -> list[np.ndarray]:
    """Each trajectory's features through ``models`` in turn (``model.transform``: a TICA projection, then
    k-means' cluster indices), one trajectory at a time: the list deeptime's count estimators take."""
    out = []
    for x in feature_arrays(features):
        for model in models:
            x = model.transform(x)
        out.append(np.asarray(x))
    return out


__all__ = ["CHUNK_BYTES", "FeatureStream", "FeatureTrajectory", "feature_arrays", "feature_values", "frame_chunks",
           "lagged_chunks", "lagged_pairs", "pairs_of", "piece_bounds", "stream_transform",
           "trajectories"]
