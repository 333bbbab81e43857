"""trajscale for MDAnalysis users: a trajectory reader and writer, and backends for its analyses.

Importing this module registers the format ``"TRAJSCALE"`` with MDAnalysis; its own ``H5MD`` reader, every
other format and every list of files not given with format ``"TRAJSCALE"`` read as before (docs/mdanalysis.md).
"""

from __future__ import annotations

from .backends import DaskBackend, MPIBackend
from .reader import Reader
from .writer import Writer

__all__ = ["DaskBackend", "MPIBackend", "Reader", "Writer"]
