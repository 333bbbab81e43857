"""Collective hyperslab writes, and the frame ranges they have covered."""

from __future__ import annotations

import h5py
import numpy as np


def write_at(ds: h5py.Dataset, offset: tuple[int, ...], data: np.ndarray | None, dxpl) -> None:
    """Write ``data`` at ``offset``; with None select nothing (a collective call still joins in)."""
    fspace = ds.id.get_space()
    if data is None or data.size == 0:
        if dxpl is None:
            return
        fspace.select_none()
        mspace = h5py.h5s.create_simple((1,))
        mspace.select_none()
        data = np.zeros(1, dtype=ds.dtype)
    else:
        fspace.select_hyperslab(offset, data.shape)
        mspace = h5py.h5s.create_simple(data.shape)
    ds.id.write(mspace, fspace, data, dxpl=dxpl)


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged half-open ranges."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


__all__ = ["merge_ranges", "write_at"]
