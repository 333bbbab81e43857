"""Frames of one stored series as another series stores them: what ``rechunk`` does to every slab it copies."""

from __future__ import annotations

import h5py
import numpy as np

from ..errors import InputFileError
from ..h5md.codecs import deltas_of, lossy_attrs, quantize


def recoder(sds: h5py.Dataset, dds: h5py.Dataset):
    """``fn(rows, first)``: frames ``first ...`` of input series ``sds`` (``rows`` as stored there) as
    output series ``dds`` stores them - decoded from deltas, re-coded to deltas or rounded to floats."""
    c_in, c_out = deltas_of(sds), deltas_of(dds)
    lossy = lossy_attrs(dds)
    q = lossy[1] if lossy and lossy[2] == "floats" else None   # (idempotent on quantized input)

    def recode(rows: np.ndarray, first: int) -> np.ndarray:
        out = rows if c_in is None else c_in.decode(rows)
        if c_out is not None:
            try:
                out = c_out.encode(out)
            except ValueError as exc:
                raise InputFileError(sds.file.filename,
                                     f"{sds.name} frames {first}-{first + len(rows)}: {exc}") from None
        elif q is not None:
            out = quantize(out, float(q))
        return np.ascontiguousarray(out, dds.dtype)
    return recode
