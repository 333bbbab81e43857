"""XTC's and TRR's traits (:class:`~trajscale.formats.FormatTraits`): read by the format registry
before it imports the XDR reader."""

from __future__ import annotations

from ..formats import FormatTraits

#: GROMACS's XTC and TRR, told by their magic numbers (1995, 1993; big-endian).
XDR = FormatTraits(
    kind="xdr", source="trajscale.xdr.source:XDRSource", formats=("XTC", "TRR"),
    suffixes={".xtc": "XTC", ".trr": "TRR"}, begins=(b"\x00\x00\x07\xcb", b"\x00\x00\x07\xc9"), precedence=40,
    frames_only={"XTC": "XTC", "TRR": "TRR"}, fetched_modules=("trajscale.xdr.offsets",),
    partial_frames="trajscale.xdr.offsets:refuse_partial_frames")

__all__ = ["XDR"]
