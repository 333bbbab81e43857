"""User functions for the tests: top-level, importable by workers (``tests.analysis.user_functions:...``)."""

from __future__ import annotations

import numpy as np


def com_z(positions, box):
    """z of the geometric centre, per frame."""
    return positions[..., 2].astype(np.float64).mean(axis=1)


def extent(positions, box):
    """(F, 3) max - min per axis."""
    return (positions.max(axis=1) - positions.min(axis=1)).astype(np.float64)


def sum_xyz(positions, box):
    """An accumulator partial: summed coordinates and the frame count."""
    return {"sum": positions.astype(np.float64).sum(axis=(0, 1)), "n": positions.shape[0]}


def add(partials):
    return {"sum": np.sum([p["sum"] for p in partials], axis=0), "n": sum(p["n"] for p in partials)}


def explode(positions, box):
    raise ValueError("boom")
