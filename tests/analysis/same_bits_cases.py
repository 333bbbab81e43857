"""The analyses tests/analysis/test_same_bits.py compares bit for bit, and how a result's arrays are read:
shared with its MPI script (same_bits_script.py), whose ranks import this and not the test module, so that
they need not import MDAnalysis, its analyses and hypothesis (seconds of CPU a rank)."""

from __future__ import annotations

from dataclasses import fields, is_dataclass

import numpy as np

import trajscale as ts
from tests.datafiles import PSF_TRICLINIC

#: A water box with a triclinic cell (RDF needs a box); the fits use every atom.
SYSTEM = "triclinic_dcd"
#: Its topology (analyses_cases.SYSTEMS[SYSTEM][0], found without importing MDAnalysis).
TOPOLOGY = PSF_TRICLINIC
ANALYSES = {
    "rmsd": lambda s: ts.RMSD(select="name OH2"),
    "rmsf": lambda s: ts.RMSF(select="name OH2"),
    "rmsf_fit": lambda s: ts.RMSF(select="name OH2", fit_select="all"),
    "rgyr": lambda s: ts.RadiusOfGyration(select="name OH2"),
    "average": lambda s: ts.AverageStructure(select="name OH2"),
    "distances": lambda s: ts.Distances("name OH2 and index 0:150", "name OH2 and index 180:374"),
    "contacts": lambda s: ts.Contacts(select=("name OH2 and index 0:150", "name OH2 and index 180:374"),
                                      radius=8.0),
    "rdf": lambda s: ts.RDF("name OH2", "name OH2", nbins=40, range=(0.0, 8.0), exclusion_block=(1, 1)),
}


def result_arrays(r) -> dict[str, np.ndarray]:
    """Every array a result holds (dataclass fields, or a TimeSeries's frames, times and values)."""
    if is_dataclass(r):
        return {f.name: np.asarray(getattr(r, f.name)) for f in fields(r)
                if isinstance(getattr(r, f.name), np.ndarray)}
    raise TypeError(type(r))
