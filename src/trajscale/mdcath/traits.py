"""mdCATH's traits (:class:`~trajscale.formats.FormatTraits`): read by the format registry before it
imports anything of mdCATH, so that a file of another format never imports HDF5."""

from __future__ import annotations

from ..formats import FormatTraits
from ..util import HDF5_MAGIC

#: mdCATH's per-domain HDF5 file: asked before H5MD, which takes any HDF5 file; one named ``.h5md`` is H5MD's.
#: Its frames are read at their byte offsets by the chunk reader (imported once before the workers start).
MDCATH = FormatTraits(
    kind="mdcath", source="trajscale.mdcath.source:MDCATHSource", formats=("MDCATH",), begins=(HDF5_MAGIC,),
    precedence=20, not_named=(".h5md",), members="trajscale.mdcath.source:ensemble_members",
    member_patterns=("mdcath_dataset_*.h5",), fetched_modules=("trajscale.mdcath.layout",),
    description=("mdCATH per-domain HDF5 (read-only): each temperature/replica a trajectory, "
                 "file.h5#348/0; the topology from its pdbProteinAtoms"),
    supports_slab_reads=True, reads_urls=True, fills_rows=True, worker_modules=("trajscale.hdf5.chunks",),
    shares_file_store=True, kept_on_node=True)

__all__ = ["MDCATH"]
