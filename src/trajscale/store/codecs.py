"""Lossy storage at a stated precision, readable by any HDF5 reader as plain floats.

Like XTC's precision (0.001 nm), but without a custom codec: values are rounded
to a power-of-two quantum no larger than the precision, which zeroes the float32
mantissa bits below it; shuffle plus any lossless filter (gzip, zstd, blosc) then
compresses the zeros away. The error bound is quantum / 2 <= precision / 2.
"""

from __future__ import annotations

import math

import numpy as np


def quantum(precision: float) -> float:
    """The largest power of two <= ``precision`` (in the data's unit)."""
    if not precision > 0:
        raise ValueError(f"precision must be positive, got {precision}")
    return 2.0 ** math.floor(math.log2(precision))


def quantize(values: np.ndarray, q: float) -> np.ndarray:
    """``values`` rounded to multiples of the power-of-two quantum ``q``, as float32."""
    out = np.asarray(values, np.float64) / q
    np.round(out, out=out)
    out *= q
    return out.astype(np.float32)
