"""The bounded cache the process's in-memory caches share (``trajscale.util.LRU``): its bounds and what goes first."""

from __future__ import annotations

from trajscale.util import LRU


def test_the_least_recently_used_goes_first_within_a_count_and_a_byte_bound():
    by_count = LRU(3)
    assert [by_count.put(k, v) for k, v in (("a", 1), ("b", 2), ("c", 3))] == [[], [], []]
    assert by_count.get("a") == 1 and by_count.peek("b") == 2   # (a used again; b only looked at)
    assert by_count.put("d", 4) == [("b", 2)]
    assert by_count.put("c", 30) == [] and by_count.put("e", 5) == [("a", 1)]   # (c put again: used)
    assert [k for k in "abcde" if k in by_count] == ["c", "d", "e"] and by_count.get("b", "gone") == "gone"

    by_bytes = LRU(max_bytes=10)
    assert by_bytes.put("x", b"1234") == [] and by_bytes.put("y", b"5678") == []
    assert by_bytes.put("z", b"9abc") == [("x", b"1234")] and by_bytes.bytes == 8
    assert by_bytes.put("y", b"5") == [] and by_bytes.bytes == 5   # (a value replaced: its old bytes let go)
    assert by_bytes.put("big", b"." * 20) == [("z", b"9abc"), ("y", b"5")]   # (the newest stays, whatever its size)
    assert by_bytes.bytes == 20 and "big" in by_bytes

    both = LRU(2, max_bytes=100, size=lambda piece: len(piece[1]))
    both.put(0, (9, b"." * 60))
    assert both.put(1, (5, b"." * 50)) == [(0, (9, b"." * 60))]   # (the bytes bound first)
    assert both.put(2, (5, b"")) == [] and both.put(3, (5, b"")) == [(1, (5, b"." * 50))] and both.bytes == 0
    both.clear()
    assert 2 not in both and both.bytes == 0
