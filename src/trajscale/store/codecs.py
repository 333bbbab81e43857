"""Lossy storage of coordinates at a stated precision, like XTC's 0.001 nm.

Two encodings, chosen with ``--encoding`` (measured on the AdK-in-water XTC,
47,681 atoms, at 0.01 Å; ``benchmarks/codecs.py``):

``floats`` (the default)
    Values are rounded to a power-of-two quantum no larger than the precision,
    which zeroes the float32 mantissa bits below it; shuffle plus a lossless
    filter compresses the zeros away.  Every HDF5 reader (MDAnalysis included)
    gets plain floats.  About 1.5x the XTC's size: a value alone still carries
    ~13 bits (a 100 Å box in 0.01 Å steps), and no generic filter predicts a
    value from its neighbours.  HDF5's own scale-offset filter (decimal
    scaling, also plain floats to every reader) gives the same size and reads
    3x slower, so it is not offered.

``deltas``
    What XTC does: integers ``round(x / precision)``, each atom stored as the
    difference from the previous atom of the same frame (atoms of a molecule
    are neighbours), zigzag-coded into uint32 so small differences of either
    sign have zero high bytes for shuffle + zstd to remove.  1.12x the XTC's
    size.  Only trajscale decodes it: the dataset's ``unit`` attribute names
    the encoding (so MDAnalysis's H5MD reader refuses the file with "unit ...
    is not recognized" instead of reading integers as coordinates), the real
    unit is in ``trajscale_unit``.

Both bound the error by precision / 2 and record, on the dataset:
``trajscale_precision`` (Å, as stated), ``trajscale_quantum`` (the step, in the
file's unit) and ``trajscale_encoding``.
"""

from __future__ import annotations

import functools
import math

import numpy as np

ENCODINGS = ("floats", "deltas")
#: ``trajscale_encoding`` of a delta-coded dataset (its ``unit`` attribute starts with it too).
DELTAS = "atom-deltas-zigzag-uint32"
#: Largest |x / quantum| stored as deltas: differences of two such values fit int32.
MAX_STEPS = 2**30 - 1


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


def encode_deltas(values: np.ndarray, q: float) -> np.ndarray:
    """``(frames, atoms, 3)`` values as zigzag-coded uint32 differences of ``round(values / q)`` along atoms.

    Raises ValueError for values that are not finite or too large for int32 steps of ``q``.
    """
    steps = np.asarray(values, np.float64) / q
    np.rint(steps, out=steps)
    bad = ~(np.abs(steps) <= MAX_STEPS)          # NaN too
    if bad.any():
        worst = values[bad].flat[0]
        raise ValueError(f"a coordinate ({worst}) is not finite or exceeds {MAX_STEPS * q:.4g} "
                         f"(2^30 steps of {q:g}): use a coarser precision or --encoding floats")
    ints = steps.astype(np.int32)
    d = np.empty_like(ints)
    d[:, :1] = ints[:, :1]
    np.subtract(ints[:, 1:], ints[:, :-1], out=d[:, 1:])
    return ((d << 1) ^ (d >> 31)).view(np.uint32)


def decode_deltas(raw: np.ndarray, q: float, out: np.ndarray | None = None) -> np.ndarray:
    """Inverse of :func:`encode_deltas`: float32 ``(frames, atoms, 3)``, into ``out`` if given.

    ``raw`` must start at atom 0 of each frame (a difference needs its predecessor).
    """
    raw = np.asarray(raw, np.uint32)
    if out is None:
        out = np.empty(raw.shape, np.float32)
    k = _numba()
    if k is not None and raw.ndim == 3 and raw.flags.c_contiguous and out.flags.c_contiguous:
        k.decode_deltas(raw, np.float64(q), out)   # float64: the float32 nearest i * q
        return out
    d = (raw >> 1).view(np.int32)
    d ^= -(raw & 1).view(np.int32)
    np.cumsum(d, axis=1, out=d)
    np.multiply(d, np.float64(q), out=out, casting="unsafe")
    return out


def lossy_attrs_for(precision: float, encoding: str, unit: str, scale: float) -> dict:
    """Attributes of a position dataset in ``unit`` (``scale`` Å per unit) stored at ``precision`` Å."""
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    deltas = encoding == "deltas"
    attrs = {"trajscale_precision": float(precision),
             # in the file's unit: exact for integers, a power of two for floats (zeroed mantissa bits)
             "trajscale_quantum": precision / scale if deltas else quantum(precision / scale),
             "trajscale_encoding": DELTAS if deltas else "floats"}
    if deltas:
        attrs |= {"trajscale_unit": unit, "unit": f"{DELTAS} (read with trajscale)"}
    return attrs


def encode(values: np.ndarray, attrs) -> np.ndarray:
    """``values`` (in the file's unit) as a dataset with :func:`lossy_attrs_for`'s ``attrs`` stores them."""
    q = float(attrs["trajscale_quantum"])
    return encode_deltas(values, q) if attrs["trajscale_encoding"] == DELTAS else quantize(values, q)


@functools.cache
def _numba():
    try:
        from . import _numba_codecs as k
    except ImportError:
        return None
    return k


def lossy_attrs(ds) -> tuple[float, float, str] | None:
    """(precision in Å, quantum in the file's unit, encoding) of a lossy dataset, else None."""
    if "trajscale_quantum" not in ds.attrs:
        return None
    enc = ds.attrs.get("trajscale_encoding", "floats")
    enc = enc.decode() if isinstance(enc, bytes) else str(enc)
    return float(ds.attrs.get("trajscale_precision", np.nan)), float(ds.attrs["trajscale_quantum"]), enc


def delta_quantum(ds) -> float | None:
    """The quantum of a delta-coded dataset (None for any other)."""
    lossy = lossy_attrs(ds)
    return lossy[1] if lossy and lossy[2] == DELTAS else None
