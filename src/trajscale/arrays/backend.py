"""The xarray backend: ``xr.open_dataset(path, engine="trajscale")`` and :func:`open_dataset`.

Registered under the ``xarray.backends`` entry point, so xarray finds it without ``import trajscale``. It opens
what :func:`trajscale.sources.open_source` opens.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterable

from xarray.backends import BackendEntrypoint

from ..storage.location import Location
from .labels import LABELS


def _paths(filename_or_obj) -> list[str]:
    if isinstance(filename_or_obj, (str, os.PathLike)):
        return [os.fspath(filename_or_obj)]
    return [os.fspath(p) for p in filename_or_obj]


class TrajscaleBackendEntrypoint(BackendEntrypoint):
    """Molecular-dynamics trajectories (H5MD, segment indexes, XTC/TRR parts, GROMACS restart chains)
    as lazy Datasets read through trajscale's slab reads.

    Keyword arguments of ``open_dataset``: ``topology``, ``select``, ``group``, ``assume_units`` and
    ``continuous``, as :func:`open_dataset` takes them."""

    description = "MD trajectories (H5MD, XTC/TRR chains, segments) through trajscale's slab reads"
    url = "https://github.com/trajscale/trajscale/blob/main/docs/arrays.md"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "topology", "select", "group",
                               "assume_units", "continuous", "storage_options")

    def open_dataset(self, filename_or_obj, *, drop_variables: Iterable[str] | None = None,
                     topology: str | os.PathLike | None = None, select: str | None = None,
                     group: str | None = None, assume_units: str | None = None, continuous: bool = False,
                     storage_options: dict | None = None):
        from ..sources import open_source
        from .dataset import build_dataset

        top = os.fspath(topology) if topology is not None else None
        # a URL's options: kept in the source's config, which the variables reopen it from
        source = open_source(Location.each(filename_or_obj, storage_options), top, group=group,
                             assume_units=assume_units, continuous=continuous)
        try:
            return build_dataset(source, top, drop_variables or (), select)
        finally:
            source.close()   # the variables reopen it from its config, in whichever process reads

    def guess_can_open(self, filename_or_obj) -> bool:
        """A file the registry reads without a topology (its traits say so), which its Source says it can open."""
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        from ..sources.registry import recognised

        match = recognised(Location(filename_or_obj))
        return (match is not None and match.source.traits.self_describing
                and match.source.guess_can_open(os.fspath(filename_or_obj)))


#: The start of xarray's warning about chunks that do not fall on the preferred chunks' boundaries.
SEPARATE = "The specified chunks separate the stored chunks"


def _on_stored_chunks(ds) -> bool:
    """Whether every Dask chunk along frame begins where a stored chunk begins (``chunks={}`` or a multiple)."""
    from .dataset import STORED_CHUNKS

    for var in ds.variables.values():
        stored = var.encoding.get(STORED_CHUNKS)
        if var.chunks is None or stored is None or "frame" not in var.dims:
            continue
        n = var.sizes["frame"]
        starts = (set(range(0, n, stored)) if isinstance(stored, int)
                  else set(itertools.accumulate(stored, initial=0)))
        if not set(itertools.accumulate(var.chunks[var.dims.index("frame")][:-1], initial=0)) <= starts:
            return False
    return True


def open_dataset(topology: str | os.PathLike | None, trajectories, *, chunks=None, select: str | None = None,
                 group: str | None = None, assume_units: str | None = None, continuous: bool = False,
                 storage_options: dict | None = None, **kwargs):
    """A trajectory as a lazy :class:`xarray.Dataset` (see :mod:`trajscale.arrays`).

    Parameters
    ----------
    topology
        A topology file (any format MDAnalysis parses) for the per-atom labels and
        ``ds.trajscale.select``; None for an H5MD file that stores its atoms, or none at all.
    trajectories
        An H5MD file, a segment index, an XTC/TRR, or a list of parts joined in order.
    chunks
        As :func:`xarray.open_dataset`: None (lazy NumPy-backed variables, read on access; a
        reduction over them loads the whole variable), ``{}`` (Dask, chunks of whole stored chunks
        or parts, grouped to tens of MB) or sizes per dimension (multiples of
        ``ds.positions.encoding["preferred_chunks"]["frame"]``).
    select
        Only the atoms this selection (MDAnalysis's language) picks; with ``chunks``, every Dask
        chunk then reads only their runs (a selection made after chunking reads whole chunks).
    group, assume_units, continuous
        As :func:`trajscale.sources.open_source`.
    storage_options
        For a trajectory behind a URL (``s3://``, ``http(s)://``): fsspec-style options (docs/remote.md).
    kwargs
        Passed to :func:`xarray.open_dataset` (``drop_variables``, ``cache``, ...).
    """
    import xarray as xr

    from . import accessor  # noqa: F401 - registers ds.trajscale

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = xr.open_dataset(_paths(trajectories) if not isinstance(trajectories, (str, os.PathLike))
                             else os.fspath(trajectories), engine=TrajscaleBackendEntrypoint, chunks=chunks,
                             topology=topology, select=select, group=group, assume_units=assume_units,
                             continuous=continuous, storage_options=storage_options, **kwargs)
    for w in caught:   # xarray warns against any chunks but chunks={}'s: only those that cut a stored chunk
        if not (SEPARATE in str(w.message) and _on_stored_chunks(ds)):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    # the per-atom labels stay NumPy arrays (xarray makes every variable a Dask array under chunks)
    labels = [k for k in LABELS if k in ds.coords and ds[k].chunks is not None]
    return ds.assign_coords({k: ds[k].compute() for k in labels}) if labels else ds
