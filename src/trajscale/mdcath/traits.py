"""mdCATH's traits (:class:`~trajscale.formats.FormatTraits`): read by the format registry before it
imports anything of mdCATH, so that a file of another format never imports HDF5."""

from __future__ import annotations

from ..formats import FormatTraits
from ..util import HDF5_MAGIC

#: mdCATH's per-domain HDF5 file: asked before H5MD, which takes any HDF5 file; one named ``.h5md`` is H5MD's.
MDCATH = FormatTraits(
    kind="mdcath", source="trajscale.mdcath.source:MDCATHSource", formats=("MDCATH",), begins=(HDF5_MAGIC,),
    precedence=20, not_named=(".h5md",), members="trajscale.mdcath.source:ensemble_members",
    member_patterns=("mdcath_dataset_*.h5",), fetched_modules=("trajscale.mdcath.layout",))

__all__ = ["MDCATH"]
