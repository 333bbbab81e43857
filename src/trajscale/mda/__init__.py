"""trajscale for MDAnalysis users: a trajectory reader and writer, and backends for its analyses.

Importing this module registers the format ``"TRAJSCALE"`` with MDAnalysis (its own ``H5MD``
reader and every other format are left as they are; a list of files given with format ``"TRAJSCALE"``
is read by trajscale's reader, every other list by MDAnalysis's ChainReader as before):

>>> import trajscale.mda
>>> u = mda.Universe("top.tpr", "traj.h5md", format="TRAJSCALE")     # any trajscale store
>>> from MDAnalysis.analysis import rms
>>> r = rms.RMSD(u.select_atoms("name CA")).run(backend=trajscale.mda.MPIBackend(),
...                                            unsupported_backend=True)
>>> r.results.rmsd, r.report       # MDAnalysis's answer, and trajscale's RunReport
"""

from __future__ import annotations

from .backends import DaskBackend, MPIBackend
from .reader import Reader
from .writer import Writer

__all__ = ["DaskBackend", "MPIBackend", "Reader", "Writer"]
