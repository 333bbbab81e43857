"""Ranges of a file's bytes: which requests read them (nearby ranges merged, long ones split), and reading them.

Two ranges with fewer than ``merge_gap`` bytes between them are fetched in one request, where moving the gap's
bytes costs less than a request (:data:`MERGE_GAP`).
"""

from __future__ import annotations

from typing import Protocol

from ..errors import ConfigError


class Ranged(Protocol):
    """What reads ranges: a :class:`~.bytestore.ByteStore`."""

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list: ...


#: Two ranges with fewer bytes than this between them are fetched in one request (``merge_gap``): gap <
#: bandwidth x latency shared by the requests in flight (100 MB/s x 20 ms / 32 is 62.5 kB). A larger gap
#: fetches most of each frame for a CA selection and saves requests that were nearly free.
MERGE_GAP = 64 * 1024


def merge_gap_of(options: dict | None) -> int:
    """``merge_gap`` of these storage options (bytes; :data:`MERGE_GAP` if not given), checked."""
    value = (options or {}).get("merge_gap", MERGE_GAP)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != int(value):
        raise ConfigError(f"storage option merge_gap: give a number of bytes, 0 or more (got {value!r})")
    return int(value)


def coalesce(ranges: list[tuple[int, int]], gap: int,
             max_request: int | None = None) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Ranges sorted and merged within ``gap`` and ``max_request``: (merged, each range's (merged index, offset))."""
    order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    merged: list[list[int]] = []
    where: list[tuple[int, int]] = [(0, 0)] * len(ranges)
    for i in order:
        a, b = ranges[i]
        if merged and a - merged[-1][1] <= gap and (max_request is None or max(b, merged[-1][1])
                                                      - merged[-1][0] <= max_request):
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
        where[i] = (len(merged) - 1, a - merged[-1][0])
    return [(a, b) for a, b in merged], where


def requests_of(ranges: list[tuple[int, int]], gap: int, max_request: int | None = None):
    """The requests :func:`read_coalesced` sends: (merged ranges, places in them, requests, their merged range)."""
    merged, where = coalesce(ranges, gap, max_request)
    pieces, owner = [], []
    for m, (a, b) in enumerate(merged):
        step = b - a if not max_request else max_request
        for x in range(a, b, max(1, step)):
            pieces.append((x, min(b, x + step)))
            owner.append(m)
    return merged, where, pieces, owner


def prefetch_coalesced(store: Ranged, ranges: list[tuple[int, int]], gap: int,
                       max_request: int | None = None) -> None:
    """Start fetching the requests :func:`read_coalesced` will send for ``ranges`` (where the store reads ahead)."""
    ahead = getattr(store, "prefetch", None)
    if ahead is not None and ranges:
        ahead(requests_of(ranges, gap, max_request)[2])


def read_coalesced(store: Ranged, ranges: list[tuple[int, int]], gap: int,
                   max_request: int | None = None) -> list[memoryview]:
    """Each range's bytes, read as :func:`coalesce` merges them; longer than ``max_request``: several requests."""
    merged, where, pieces, owner = requests_of(ranges, gap, max_request)
    got = store.read_ranges(pieces)
    firsts: list[int] = []   # each merged range's first request
    for i, m in enumerate(owner):
        if m == len(firsts):
            firsts.append(i)
    out = []
    for (m, off), (a, b) in zip(where, ranges, strict=True):
        # a view of one request's bytes, or the pieces it spans joined (no whole merged range is copied)
        start = merged[m][0] + off
        i = firsts[m] + ((off // max_request) if max_request else 0)
        lo = start - pieces[i][0]
        if b - a <= pieces[i][1] - start:
            out.append(memoryview(got[i])[lo:lo + (b - a)])
            continue
        parts, left = [], b - a
        while left > 0:
            take = memoryview(got[i])[lo:lo + left]
            parts.append(take)
            left -= len(take)
            i, lo = i + 1, 0
        out.append(memoryview(b"".join(parts)))
    return out
