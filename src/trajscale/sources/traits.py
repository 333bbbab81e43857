"""The segment index's traits (:class:`~trajscale.formats.FormatTraits`): read by the format registry before it
imports the segmented Source."""

from __future__ import annotations

from ..formats import FormatTraits

#: A segment index (JSON, an object first, after any white space) or the folder that holds one.
SEGMENTS = FormatTraits(
    kind="segments", source="trajscale.sources.segments:SegmentedSource", formats=("SEGMENTS",),
    suffixes={".json": "SEGMENTS"}, begins=(b"{", b" ", b"\t", b"\n", b"\r", b"\x0b", b"\x0c"), precedence=10,
    self_describing=True,
    description="a trajscale segment index (JSON, or its folder): parts in the formats marked for parts",
    supports_following=True, snapshots="trajscale.sources.follow:index_snapshot", lists_parts=True,
    takes_h5md_options=True, reads_urls=True)

__all__ = ["SEGMENTS"]
