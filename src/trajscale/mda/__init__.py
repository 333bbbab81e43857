"""Run MDAnalysis's own analysis classes on trajscale's executors (MPI ranks, a Dask cluster).

>>> from MDAnalysis.analysis import rms
>>> r = rms.RMSD(u.select_atoms("name CA")).run(backend=trajscale.mda.MPIBackend(),
...                                            unsupported_backend=True)
>>> r.results.rmsd, r.report       # MDAnalysis's answer, and trajscale's RunReport
"""

from __future__ import annotations

from .backends import DaskBackend, MPIBackend

__all__ = ["DaskBackend", "MPIBackend"]
