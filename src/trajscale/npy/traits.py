"""The ``.npy`` format's traits (:class:`~trajscale.formats.FormatTraits`): read by the format registry before it
imports the Source."""

from __future__ import annotations

from ..formats import FormatTraits

#: A NumPy ``.npy`` array of positions.
NPY = FormatTraits(kind="npy", source="trajscale.npy.source:NumpySource", formats=("NPY",),
                   suffixes={".npy": "NPY"}, begins=(b"\x93NUMPY",), precedence=60,
                   description="NumPy .npy coordinate stacks, (frames, atoms, 3) in Å, as numpy.save writes them",
                   supports_parts=True, fills_rows=True, supports_slab_reads=True)

__all__ = ["NPY"]
