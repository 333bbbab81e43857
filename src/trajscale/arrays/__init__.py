"""Trajectories as lazy labelled arrays: an xarray backend over trajscale's Sources (docs/arrays.md).

Importing this package imports xarray and registers the ``ds.trajscale`` accessor; ``import trajscale`` does
neither (``trajscale.open_dataset`` imports it on first use).
"""

from __future__ import annotations

from . import accessor  # noqa: F401 - registers ds.trajscale
from .backend import TrajscaleBackendEntrypoint, open_dataset
from .dataset import SourceArray
from .write import WriteSpec, to_h5md

__all__ = ["SourceArray", "TrajscaleBackendEntrypoint", "WriteSpec", "open_dataset", "to_h5md"]
