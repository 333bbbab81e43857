"""Trajectories as lazy labelled arrays: an xarray backend over trajscale's Sources.

* ``xr.open_dataset(path, engine="trajscale")`` (the ``xarray.backends`` entry point) and :func:`open_dataset`
  give a Dataset whose variables read through ``Source.read(frames, atoms)``: indexing atoms reads only their
  runs; ``chunks={}`` gives Dask chunks of whole stored chunks grouped to tens of MB; the variables pickle how
  to open the trajectory, never an open file (:mod:`.dataset`, :mod:`.reads`).
* ``ds.trajscale.select("protein and name CA")``: the Dataset over a selection; ``ds.trajscale.to_h5md(path)``
  writes a Dataset back as H5MD, a slab of frames at a time (:mod:`.accessor`, :mod:`.write`).

Importing this package imports xarray and registers the ``ds.trajscale`` accessor; ``import
trajscale`` does neither (``trajscale.open_dataset`` imports it on first use).
"""

from __future__ import annotations

from . import accessor  # noqa: F401 - registers ds.trajscale
from .backend import TrajscaleBackendEntrypoint, open_dataset
from .dataset import SourceArray
from .write import WriteSpec, to_h5md

__all__ = ["SourceArray", "TrajscaleBackendEntrypoint", "WriteSpec", "open_dataset", "to_h5md"]
