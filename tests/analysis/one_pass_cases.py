"""Analyses for the one-pass tests, and the check that two results hold the same bits."""

from __future__ import annotations

import dataclasses

import numpy as np

import trajscale as ts
from tests.analysis.user_functions import add, com_z, sum_xyz


def boxed_analyses() -> dict:
    """Every built-in analysis on AdK in water (TPR/XTC: a box in every frame), name -> analysis."""
    return {
        "rmsd": ts.RMSD(select="backbone", groupselections=["name CA"]),
        "rmsf": ts.RMSF(select="name CA", fit_select="backbone"),
        "rgyr": ts.RadiusOfGyration(select="protein"),
        "average": ts.AverageStructure(select="name CA and resid 1-100"),
        "rdf": ts.RDF("name CA", "name OW and index 20000:22000", nbins=20, range=(0.0, 8.0)),
        "contacts": ts.Contacts(select=("name CA and resid 1-60", "name CA and resid 100-200"), radius=8.0),
        "distances": ts.Distances("name CA and resid 1-10", "name CA and resid 100-109"),
        "com_distance": ts.CentreOfMassDistance("resid 1-60", "resid 100-200"),
        "per_frame": ts.PerFrame(com_z, select="name CA"),
        "user_reduce": ts.Reduce(sum_xyz, add, select="backbone"),
    }


def vacuum_analyses() -> dict:
    """Analyses of AdK in vacuum (PSF/DCD: no box), name -> analysis."""
    return {
        "rmsd": ts.RMSD(select="name CA"),
        "rmsf": ts.RMSF(select="backbone", fit_select="name CA"),
        "rgyr": ts.RadiusOfGyration(select="protein"),
        "distances": ts.Distances("name CA and resid 1-10", "name CA and resid 100-109", pbc=False),
    }


def assert_same_bits(got, want, where: str = "result") -> None:
    """``got`` and ``want`` hold the same values, bit for bit (arrays: dtype, shape and bytes), the
    report aside."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} vs {type(want).__name__}"
    if dataclasses.is_dataclass(want):
        for f in dataclasses.fields(want):
            if f.name != "report":
                assert_same_bits(getattr(got, f.name), getattr(want, f.name), f"{where}.{f.name}")
    elif isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for k in want:
            assert_same_bits(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_bits(g, w, f"{where}[{i}]")
    elif isinstance(want, np.ndarray | np.generic):
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), f"{where}: the bits differ"
    elif isinstance(want, float) and np.isnan(want):
        assert np.isnan(got), where
    else:
        assert got == want, where
