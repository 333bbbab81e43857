"""The process's request threads are shared by every object: an object that asks for more threads than the
pool has (``max_concurrency`` over 256) gets a larger pool without shutting the one other objects are
submitting to (they failed with "cannot schedule new futures after shutdown")."""

from __future__ import annotations

import sys
import threading

import pytest

pytestmark = pytest.mark.remote


def test_a_larger_pool_never_shuts_the_one_others_use(nginx):
    from trajscale.storage.objects import RemoteObject

    data = bytes(range(256)) * 400
    (nginx.root / "pool.bin").write_bytes(data)
    url = nginx.url("pool.bin")
    ranges = [(a, a + 1000) for a in range(0, 90_000, 3000)]
    failures: list[BaseException] = []
    stop = threading.Event()

    def reader():
        store = RemoteObject.open(url, {})
        while not stop.is_set():
            try:
                got = store.read_ranges(ranges)
                assert [bytes(g) for g in got] == [data[a:b] for a, b in ranges]
            except BaseException as exc:   # noqa: BLE001 - what the test looks for
                failures.append(exc)
                return

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)   # threads interleave often: the pool's replacement meets others' submissions
    try:
        readers = [threading.Thread(target=reader) for _ in range(3)]
        for t in readers:
            t.start()
        for n in range(257, 257 + 40):   # each asks for one thread more than the pool has: a new pool
            big = RemoteObject.open(url, {"max_concurrency": n})
            assert bytes(big.read_ranges([(0, 10), (500, 600)])[1]) == data[500:600]
            if failures:
                break
    finally:
        stop.set()
        sys.setswitchinterval(before)
        for t in readers:
            t.join(timeout=60)
    assert not failures, f"{type(failures[0]).__name__}: {failures[0]}"
