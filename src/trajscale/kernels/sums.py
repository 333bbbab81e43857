"""Sums over frames that do not depend on how the frames were split: exact fixed-point words.

Accumulating analyses (RMSF, the average structure) add each frame's coordinates, and their squares, as integers
(:mod:`._sums`: multiples of 2**-40 Å and 2**-40 Å², one rounding per value); partials from any split of the frames
add exactly, in any order, so every executor, task count and block size gives the same bits. The float64 mean and
sum of squared deviations are computed from the integer totals once, at the end.
"""

from __future__ import annotations

import numpy as np

from ..errors import BadCoordinatesError
from ._sums import LIMIT, fixed_sums

_WORD = float(2**32)
_GRID = 2.0**-40


def frame_sums(x: np.ndarray, shift: np.ndarray, squares: bool = True, frames: np.ndarray | None = None,
               source: str = "") -> np.ndarray:
    """(4, N, 3) int64 words: the fixed-point sum of ``x - shift`` over the frames of ``x`` (F, N, 3),
    then of its square (zero unless ``squares``).  ``shift`` (N, 3) is a fixed position per atom near its
    mean (the same on every worker).  A coordinate that is not finite, or 2,048 Å or more from its shift,
    raises BadCoordinatesError naming the frame (``frames``: each frame's global index) and ``source``.
    """
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    x = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))
    shift = np.ascontiguousarray(shift, dtype=np.float64)
    out = np.zeros((4, x.shape[1], 3), np.int64)
    bad = fixed_sums(x, shift, out, squares)
    if bad >= 0:
        raise BadCoordinatesError(int(frames[bad]) if frames is not None else bad, source,
                                  f"a coordinate is not finite or is {LIMIT:,.0f} Å or more from the run's first frame")
    return out


def _value(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """hi * 2**32 + lo in float64, rounded once (both terms are exact doubles), times 2**-40."""
    return (hi.astype(np.float64) * _WORD + lo.astype(np.float64)) * _GRID


def mean_and_m2(words: np.ndarray, n: int, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float64 mean (N, 3) and sum of squared deviations from it (N, 3) of ``n`` frames."""
    s = _value(words[0], words[1])
    ss = _value(words[2], words[3])
    mean_d = s / n
    return np.asarray(shift, np.float64) + mean_d, np.maximum(ss - s * mean_d, 0.0)


def shift_of(first: np.ndarray) -> np.ndarray:
    """A shift (N, 3) from one frame's coordinates (non-finite values read as 0)."""
    first = np.asarray(first, np.float64)
    return np.ascontiguousarray(np.where(np.isfinite(first), first, 0.0))


_VOLUME_BITS = 20   # box volumes as multiples of 2**-20 Å³
#: The largest value :func:`exact_sum` takes: in units of 2**-20 it fits int64 (2**63) with room to spare.
EXACT_MAX = 2.0**42   # Å³: a cubic box of 16,384 Å (1.6 µm) a side


def exact_sum(values: np.ndarray, first_frame: int = 0, source: str = "the trajectory") -> int:
    """The sum of float64 ``values`` (e.g. box volumes, Å³) as an exact fixed-point integer (multiples of
    2**-20), so partial sums add in any order to the same total.  A value of :data:`EXACT_MAX` or more
    would wrap around in int64: it is refused, naming the frame (``first_frame`` + its index)."""
    values = np.asarray(values, np.float64)
    too_large = ~(np.abs(values) < EXACT_MAX)
    if too_large.any():
        from ..errors import MissingBoxError

        i = int(np.argmax(too_large))
        raise MissingBoxError(first_frame + i, source, f"has a box of {values[i]:g} Å³, beyond the "
                              f"{EXACT_MAX:g} Å³ (a 1.6 µm cube) whose volumes trajscale sums exactly")
    q = np.rint(values * 2.0**_VOLUME_BITS).astype(np.int64)
    return int((q >> 32).sum()) * 2**32 + int((q & 0xFFFFFFFF).sum())


def volume_of(total: int) -> float:
    """An :func:`exact_sum` total back in float64, rounded once."""
    return total / 2**_VOLUME_BITS
