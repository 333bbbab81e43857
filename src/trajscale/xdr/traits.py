"""XTC's and TRR's traits (:class:`~trajscale.formats.FormatTraits`): read by the format registry
before it imports the XDR reader."""

from __future__ import annotations

from ..formats import FormatTraits

#: GROMACS's XTC and TRR, told by their magic numbers (1995, 1993; big-endian).
XDR = FormatTraits(
    kind="xdr", source="trajscale.xdr.source:XDRSource", formats=("XTC", "TRR"),
    suffixes={".xtc": "XTC", ".trr": "TRR"}, begins=(b"\x00\x00\x07\xcb", b"\x00\x00\x07\xc9"), precedence=40,
    frames_only={"XTC": "XTC", "TRR": "TRR"}, fetched_modules=("trajscale.xdr.offsets",),
    partial_frames="trajscale.xdr.offsets:refuse_partial_frames",
    description="GROMACS XTC and TRR, read by the xdrfile library compiled into trajscale",
    supports_parts=True, fills_rows=True, worker_modules=("trajscale.xdr._xdr",), supports_following=True,
    snapshots="trajscale.xdr.follow:snapshot", grows_by_appending=True, ships_offsets=True, reads_urls=True,
    reads_given_store=True,
    decode_s_per_atom={"XTC": 8.5e-8},   # compressed coordinates (docs/benchmarks.md)
    decoding={"XTC": "prefix:trajscale's XTC decoder", "TRR": "whole:trajscale's TRR reader"})

__all__ = ["XDR"]
