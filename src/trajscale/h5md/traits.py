"""H5MD's traits (:class:`~trajscale.formats.FormatTraits`): read by the format registry before it
imports anything of H5MD, so that a file of another format never imports HDF5."""

from __future__ import annotations

import dataclasses

from ..formats import FormatTraits
from ..util import HDF5_MAGIC

#: H5MD 1.1 (any HDF5 file a more specific HDF5 format does not claim first).
H5MD = FormatTraits(
    kind="h5md", source="trajscale.h5md.source:H5MDSource", formats=("H5MD",),
    suffixes={".h5md": "H5MD", ".h5": "H5MD", ".hdf5": "H5MD"}, begins=(HDF5_MAGIC,), precedence=30,
    frames_only={"H5MD": "H5MD"}, fetched_modules=("trajscale.hdf5.metadata",), self_describing=True,
    read_cost="trajscale.h5md.recommend:run_read", description="H5MD 1.1 (HDF5), read in chunk-aligned slabs",
    supports_mpio=True, supports_parts=True, supports_following=True,
    snapshots="trajscale.h5md.follow:hdf5_snapshot", supports_slab_reads=True, takes_h5md_options=True,
    stores_atom_labels=True, reads_urls=True, reads_given_store=True, kept_on_node=True)

#: An H5MD file another process is writing (made by a followed run, never matched to a file): each rank alone.
GROWING_H5MD = dataclasses.replace(H5MD, kind="growing_h5md", source="trajscale.h5md.follow:GrowingH5MDSource",
                                   supports_mpio=False)

__all__ = ["GROWING_H5MD", "H5MD"]
