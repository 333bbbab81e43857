"""A worker's cached Source of a file whose Source ships its frame offsets (XTC/TRR) is replaced, not kept
beside, when a later round (a followed run) ships longer offsets of the same file."""

from __future__ import annotations

import MDAnalysis as mda

from trajscale.executors import base
from trajscale.sources import registry
from trajscale.storage.location import Location
from trajscale.xdr.offsets import decode_offsets, encode_offsets


def _cached(path: str) -> list:
    return [src for cache in base._SOURCES.values() for src in cache.values() if src.path == path]


def test_longer_offsets_replace_the_cached_source(adk_water):
    xtc = adk_water["xtc"]
    assert registry.guess(Location(xtc)).source.ships_offsets
    full = registry.open_file(Location(xtc)).get_config()
    n = mda.Universe(adk_water["gro"], xtc).trajectory.n_frames   # the reference: MDAnalysis's count
    first = dict(full, offsets=encode_offsets(decode_offsets(full["offsets"])[: n // 2]))   # an earlier round
    base.close_cached_sources()
    try:
        early, _ = base.cached_source(first)
        assert early.n_frames == n // 2
        later, _ = base.cached_source(full)
        assert later.n_frames == n
        assert _cached(xtc) == [later]   # the shorter round's source is closed, not kept
    finally:
        base.close_cached_sources()
