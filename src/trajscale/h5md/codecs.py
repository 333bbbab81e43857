"""Lossy storage of coordinates at a stated precision, like XTC's 0.001 nm (sizes and speeds: docs/benchmarks.md).

``floats`` (the default)
    Values are rounded to a power-of-two quantum no larger than the precision, which zeroes the float32 mantissa
    bits below it; shuffle plus a lossless filter compresses the zeros away. Every HDF5 reader gets plain floats.

``deltas``
    What XTC does, laid out for a fast decoder: integers ``round(x / precision)`` less a per-axis centre (the
    ``trajscale_center`` attribute), each atom stored as the difference from a reference atom one to three places
    before it, zigzag-coded into uint16. Atoms far from their reference in the first frame are stored first, so
    the high bytes of most values form one run of zeros that LZ4 removes. Each atom's reference and group are a
    ``uint8`` in the dataset ``trajscale_codes``. Beyond +-32767 steps of the centre, ``deltas32`` stores plain
    atom-to-atom differences as uint32. The dataset's ``unit`` attribute names the encoding, so MDAnalysis refuses
    the file instead of reading integers as coordinates; the real unit is in ``trajscale_unit``.

Both bound the error by precision / 2 and record ``trajscale_precision`` (Å, as stated), ``trajscale_quantum``
(the step, in the file's unit) and ``trajscale_encoding`` on the dataset.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from . import _codecs

ENCODINGS = ("floats", "deltas", "deltas32")
#: ``trajscale_encoding`` of delta-coded datasets (their ``unit`` attribute starts with it too).
DELTAS = "atom-refs-zigzag-uint16"
DELTAS32 = "atom-deltas-zigzag-uint32"
_STORED = {"deltas": DELTAS, "deltas32": DELTAS32}
#: what ``--encoding`` wrote a stored encoding
ENCODING_OF = {"floats": "floats", **{stored: option for option, stored in _STORED.items()}}
#: the per-atom references and groups of a ``DELTAS`` dataset, beside its ``value``
CODES = "trajscale_codes"
#: Largest |x / quantum - centre| of ``DELTAS``: the steps fit int16.
MAX_STEPS16 = 2**15 - 1
#: Farthest reference of an atom, and the first-frame difference (in steps) that puts an atom first.
MAX_REF, WIDE = 3, 128
#: Largest |x / quantum| stored as deltas: differences of two such values fit int32.
MAX_STEPS = 2**30 - 1

log = logging.getLogger(__name__)


def check_lossy_options(precision: float | None, encoding: str, compression, warn: bool = True) -> None:
    """Refuse an invalid ``precision``/``encoding`` pair (ConfigError); warn (``warn``: once, on rank 0)
    when ``precision`` comes without ``compression``, as rounded float32 then takes all its bytes."""
    from ..errors import ConfigError

    if precision is not None and not precision > 0:
        raise ConfigError(f"--precision must be positive, got {precision}")
    if encoding not in ENCODINGS:
        raise ConfigError(f"--encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    if encoding != "floats" and (precision is None or not compression):
        raise ConfigError(f"--encoding {encoding} needs --precision and a --compression (blosc-lz4 pays most)")
    if precision is not None and not compression and warn:
        log.warning("--precision %g without --compression only loses precision: the rounded float32 positions "
                    "take as much space as exact ones; add --compression (e.g. blosc-lz4 or gzip) to store them "
                    "smaller", precision)


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
    """Values as zigzag-coded uint32 differences of ``round(values / q)`` along atoms; ValueError if too large."""
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


def _steps(values: np.ndarray, q: float) -> np.ndarray:
    steps = np.asarray(values, np.float64) / q
    return np.rint(steps, out=steps)


class Deltas:
    """How one ``DELTAS`` dataset codes its frames (references, groups, centre), planned or read back (:meth:`of`)."""

    dtype = np.dtype(np.uint16)

    def __init__(self, q: float, codes: np.ndarray, center: np.ndarray) -> None:
        self.q = float(q)
        self.codes = np.ascontiguousarray(codes, np.uint8)
        self.center = np.asarray(center, np.int32).reshape(3)
        off = (self.codes & 3).astype(np.intp)
        wide = (self.codes >> 2 & 1).astype(bool)
        if len(off) and (off[0] != 0 or (off[1:] < 1).any() or (off > np.arange(len(off))).any()):
            raise ValueError("atom codes refer to atoms that do not come before them")
        # stored order: the wide atoms, then the others, each in atom order
        self.order = np.argsort(~wide, kind="stable")
        self.pos = np.empty(len(off), np.int32)
        self.pos[self.order] = np.arange(len(off), dtype=np.int32) * 3
        self.off = off.astype(np.int32)
        self._table = None

    @classmethod
    def plan(cls, reference: np.ndarray, q: float) -> Deltas:
        """The codes of ``reference`` (one frame, ``(atoms, 3)``, in the file's unit)."""
        s = _steps(reference, q)
        if not np.isfinite(s).all():
            raise ValueError("the first frame has coordinates that are not finite")
        n = len(s)
        center = np.rint((s.max(axis=0) + s.min(axis=0)) / 2) if n else np.zeros(3)
        best = np.full(n, np.inf)
        off = np.zeros(n, np.uint8)
        for k in range(1, MAX_REF + 1):     # nearest (largest axis difference) of the k-th atom back
            m = np.abs(s[k:] - s[:-k]).max(axis=1) if n > k else np.zeros(0)
            better = m < best[k:]
            best[k:][better] = m[better]
            off[k:][better] = k
        wide = best >= WIDE
        # a wide atom keeps the previous atom as reference: the decoder's branch stays predictable
        far = wide & (off > 1)
        if far.any():
            d1 = np.abs(s[1:] - s[:-1]).max(axis=1)
            off[far] = 1
            best[far] = d1[np.flatnonzero(far) - 1]
        if n:
            off[0] = 0
            best[0] = np.abs(s[0] - center).max()
        return cls(q, off | ((best >= WIDE).astype(np.uint8) << 2), center)

    @classmethod
    def of(cls, ds) -> Deltas | None:
        """The codec of a ``DELTAS`` dataset ``ds`` (None when its codes are not written yet)."""
        codes = ds.parent.get(CODES)
        if codes is None or "trajscale_center" not in ds.attrs:
            return None
        return cls(float(ds.attrs["trajscale_quantum"]), codes[()], ds.attrs["trajscale_center"])

    def store(self, ds) -> None:
        """Write the codes beside ``ds`` (replacing any) and the centre on it."""
        g = ds.parent
        if CODES in g:
            del g[CODES]
        g.create_dataset(CODES, data=self.codes)
        ds.attrs["trajscale_center"] = self.center

    def encode(self, values: np.ndarray) -> np.ndarray:
        """Values as stored (uint16, stored atom order); ValueError if not finite, too far, or misshapen."""
        values = np.asarray(values)
        dtype = np.float32 if values.dtype == np.float32 else np.float64
        values = np.ascontiguousarray(values, dtype)   # native order too
        self._check_shape(values.shape, "values")
        out = np.empty(values.shape, np.uint16)
        bad = _codecs.encode_refs16(values, self.q, self.center.astype(np.float64), self.pos, self.off,
                                    out.reshape(len(out), -1))
        if bad >= 0:
            raise ValueError(f"a coordinate ({values.flat[bad]}) is not finite or lies more than "
                             f"{MAX_STEPS16 * self.q:.4g} (32767 steps of {self.q:g}) from the first frame's centre: "
                             "use --encoding deltas32 or a coarser precision")
        return out

    def _check_shape(self, shape: tuple, what: str) -> None:
        if len(shape) != 3 or shape[1:] != (len(self.codes), 3):
            raise ValueError(f"{what} must be (frames, {len(self.codes)}, 3) for this dataset's codes, "
                             f"got shape {shape}")

    def atoms_needed(self, last: int) -> int:
        """Atoms to read to decode atoms ``[0, last)``: every one (the stored order mixes them)."""
        return len(self.codes)

    def table(self) -> np.ndarray:
        """``(3, 65536)`` float32: per axis, the float32 nearest ``(steps + centre) * q`` per step count."""
        if self._table is None:
            steps = np.arange(2**16, dtype=np.uint16).view(np.int16).astype(np.float64)
            self._table = np.stack([((steps + c) * self.q).astype(np.float32) for c in self.center])
        return self._table

    def decode(self, raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Inverse of :meth:`encode`: float32 ``(frames, atoms, 3)``, into ``out`` if given."""
        raw = np.ascontiguousarray(raw, np.uint16)
        self._check_shape(raw.shape, "raw")
        return _into(out, raw.shape, lambda o: _codecs.decode_refs16(raw, self.pos, self.off, self.table(), o))


class Deltas32:
    """The codec of a ``DELTAS32`` dataset: plain atom-to-atom differences."""

    dtype = np.dtype(np.uint32)

    def __init__(self, q: float) -> None:
        self.q = float(q)

    def encode(self, values: np.ndarray) -> np.ndarray:
        return encode_deltas(values, self.q)

    def atoms_needed(self, last: int) -> int:
        return last

    def decode(self, raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return decode_deltas(raw, self.q, out)


def decode_deltas(raw: np.ndarray, q: float, out: np.ndarray | None = None) -> np.ndarray:
    """Inverse of :func:`encode_deltas`, into ``out`` if given; ``raw`` must start at atom 0 of each frame."""
    raw = np.ascontiguousarray(raw, np.uint32)
    if raw.ndim != 3:
        raise ValueError(f"raw must be (frames, atoms, 3), got shape {raw.shape}")
    # q in float64: each value is the float32 nearest i * q
    return _into(out, raw.shape, lambda o: _codecs.decode_deltas(raw, float(q), o))


def _into(out: np.ndarray | None, shape: tuple, kernel) -> np.ndarray:
    """``kernel(o)`` on a C-contiguous float32 ``o`` of ``shape``: ``out`` itself if it is one, else copied."""
    if out is not None and out.shape != shape:
        raise ValueError(f"out has shape {out.shape}, the decoded values {shape}")
    if out is not None and out.dtype == np.float32 and out.flags.c_contiguous and out.flags.writeable:
        kernel(out)
        return out
    o = np.empty(shape, np.float32)
    kernel(o)
    if out is None:
        return o
    out[...] = o
    return out


def lossy_attrs_for(precision: float, encoding: str, unit: str, scale: float) -> dict:
    """Attributes of a position dataset in ``unit`` (``scale`` Å per unit) stored at ``precision`` Å."""
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    deltas = encoding != "floats"
    attrs = {"trajscale_precision": float(precision),
             # in the file's unit: exact for integers, a power of two for floats (zeroed mantissa bits)
             "trajscale_quantum": precision / scale if deltas else quantum(precision / scale),
             "trajscale_encoding": _STORED.get(encoding, "floats")}
    if deltas:
        attrs |= {"trajscale_unit": unit, "unit": f"{attrs['trajscale_encoding']} (read with trajscale)"}
    return attrs


def stored_dtype(attrs) -> np.dtype:
    """The dtype of a position dataset with :func:`lossy_attrs_for`'s ``attrs`` (None: lossless)."""
    enc = (attrs or {}).get("trajscale_encoding")
    return np.dtype(np.uint16 if enc == DELTAS else np.uint32 if enc == DELTAS32 else np.float32)


def codec_for(attrs, reference: np.ndarray | None) -> Deltas | Deltas32 | None:
    """The delta codec ``attrs`` write (None for floats), a ``DELTAS`` one planned from ``reference`` (file unit)."""
    enc = (attrs or {}).get("trajscale_encoding")
    q = float(attrs["trajscale_quantum"]) if attrs else 0.0
    if enc == DELTAS32:
        return Deltas32(q)
    if enc == DELTAS and reference is not None:
        return Deltas.plan(reference, q)
    return None


def encode(values: np.ndarray, attrs, codec=None) -> np.ndarray:
    """``values`` (file unit) as the dataset with :func:`lossy_attrs_for`'s ``attrs`` stores them."""
    if attrs["trajscale_encoding"] == "floats":
        return quantize(values, float(attrs["trajscale_quantum"]))
    if codec is None:
        raise ValueError("delta-coded positions need their codec (codec_for) before the first frame")
    return codec.encode(values)


def lossy_attrs(ds) -> tuple[float, float, str] | None:
    """(precision in Å, quantum in the file's unit, encoding) of a lossy dataset, else None."""
    if "trajscale_quantum" not in ds.attrs:
        return None
    enc = ds.attrs.get("trajscale_encoding", "floats")
    enc = enc.decode() if isinstance(enc, bytes) else str(enc)
    if enc not in ENCODING_OF:   # never read integers as if they were floats
        raise ValueError(f"{ds.name} has the unknown encoding {enc!r} (known: {', '.join(ENCODING_OF)}); "
                         "a newer trajscale may read it")
    return float(ds.attrs.get("trajscale_precision", np.nan)), float(ds.attrs["trajscale_quantum"]), enc


def is_delta_coded(ds) -> bool:
    """Whether ``ds`` stores delta-coded integers (decoded by trajscale only)."""
    lossy = lossy_attrs(ds)
    return bool(lossy) and lossy[2] in (DELTAS, DELTAS32)


def deltas_of(ds) -> Deltas | Deltas32 | None:
    """The codec that decodes ``ds`` (None for floats); ValueError for a ``DELTAS`` dataset without codes."""
    lossy = lossy_attrs(ds)
    if not lossy or lossy[2] not in (DELTAS, DELTAS32):
        return None
    if lossy[2] == DELTAS32:
        return Deltas32(lossy[1])
    codec = Deltas.of(ds)
    if codec is None:
        raise ValueError(f"{ds.name} is delta-coded but its {CODES} dataset or trajscale_center is missing")
    return codec
