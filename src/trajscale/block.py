"""Records that travel between layers: a block of frames and a frame range."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import BadCoordinatesError, FrameRangeError

#: Field (as H5MD names it) -> the attribute that holds it on a :class:`Block`, and on an
#: MDAnalysis Timestep too (both name the arrays alike).
FIELD_ATTRS = {"position": "positions", "velocity": "velocities", "force": "forces"}


@dataclass(frozen=True, slots=True)
class FrameRange:
    """A half-open range of global frame indices ``[start, stop)``."""

    start: int
    stop: int

    def __post_init__(self) -> None:
        if self.stop < self.start:
            raise ValueError(f"empty-negative frame range [{self.start}, {self.stop})")

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True, slots=True, eq=False)
class Block:
    """Frames ``start:stop:stride`` of a trajectory, for the selected atoms.

    Attributes
    ----------
    start, stop
        Global frame range of the block.
    stride
        Frames ``start, start + stride, ...`` below ``stop`` (1: every frame).
    positions
        ``(n_frames, n_atoms, 3)`` float32, Å.
    box
        ``(n_frames, 6)`` float32 ``[a, b, c, alpha, beta, gamma]`` (Å, degrees);
        zeros where the trajectory has no box.
    time
        ``(n_frames,)`` float64, ps.
    step
        ``(n_frames,)`` int64 integration steps.
    velocities, forces
        Optional arrays shaped like ``positions`` (Å/ps, kJ/(mol Å)).
    """

    start: int
    stop: int
    positions: np.ndarray
    box: np.ndarray
    time: np.ndarray
    step: np.ndarray
    velocities: np.ndarray | None = None
    forces: np.ndarray | None = None
    stride: int = 1

    @property
    def n_frames(self) -> int:
        return len(range(self.start, self.stop, self.stride))

    @property
    def frames(self) -> np.ndarray:
        """Global frame indices of the block."""
        return np.arange(self.start, self.stop, self.stride, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        arrays = (self.positions, self.box, self.time, self.step, self.velocities, self.forces)
        return int(sum(a.nbytes for a in arrays if a is not None))


def split_frames(n_frames: int, n_tasks: int, align: int = 1) -> list[FrameRange]:
    """Balanced contiguous ranges aligned to ``align`` frames; with more tasks than units some are dropped."""
    if n_frames <= 0:
        return []
    n_tasks = max(1, int(n_tasks))
    align = max(1, int(align))
    n_units = -(-n_frames // align)
    n_tasks = min(n_tasks, n_units)
    base, extra = divmod(n_units, n_tasks)
    ranges, unit = [], 0
    for i in range(n_tasks):
        k = base + (1 if i < extra else 0)
        start, stop = unit * align, min((unit + k) * align, n_frames)
        ranges.append(FrameRange(start, stop))
        unit += k
    return ranges


def finite_frames(positions: np.ndarray) -> np.ndarray:
    """(F,) bool: which frames of (F, N, 3) coordinates are all finite (one summing pass clears the common
    case; every value is checked only where a sum is not finite)."""
    with np.errstate(over="ignore", invalid="ignore"):
        quick = np.isfinite(positions.sum(axis=(1, 2)))
    return quick if quick.all() else np.isfinite(positions).all(axis=(1, 2))


def check_finite(block: Block, positions: np.ndarray, source: str) -> None:
    """Raise BadCoordinatesError naming the first frame with NaN/inf coordinates: the one check of a member's
    coordinates, by the analyses as they map its blocks and by the datasets as they are made."""
    finite = finite_frames(positions)
    if not finite.all():
        raise BadCoordinatesError(block.start + int(np.argmin(finite)), source)


def frame_index(ref_frame: int, n_frames: int, where: str) -> int:
    """``ref_frame`` as a trajectory index takes it (negative from the end), or a clear error."""
    frame = ref_frame + n_frames if ref_frame < 0 else ref_frame
    if not 0 <= frame < n_frames:
        raise FrameRangeError(f"reference frame {ref_frame} (ref_frame) outside the {n_frames} frames of {where}")
    return frame


def sorted_unique(values) -> np.ndarray:
    """``np.unique(values)`` flattened; integers done here, as ``np.unique``'s first call imports ``numpy.ma``."""
    a = np.asarray(values)
    if a.dtype.kind not in "iub":
        return np.unique(a)
    a = np.sort(a, axis=None)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size else a
