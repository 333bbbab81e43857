"""Node-local cache: one copier among concurrent first users (real processes), LRU, fallbacks, corruption."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os

import numpy as np
import pytest

from tests.executors import fork_here
from trajscale.errors import InputFileError
from trajscale.ml import H5Dataset, NodeCache, make_loader

from ._cache_worker import first_user, sha


def test_concurrent_first_users_make_one_copy(tmp_path):
    import h5py

    store = tmp_path / "big.h5"
    with h5py.File(store, "w") as f:   # ~64 MB, so the copy takes a while
        f["x"] = np.random.default_rng(0).standard_normal((1000, 8000))
    cache_dir = tmp_path / "node"
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=first_user, args=(str(store), str(cache_dir), barrier, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entry = NodeCache(cache_dir).entry(store)
    assert {r[1] for r in results} == {str(entry)}
    assert {r[2] for r in results} == {sha(store)}   # nobody read a half copy
    assert sorted(r[0] for r in results) == [False, False, False, True]   # one copier
    assert NodeCache(cache_dir).entries() == [entry]
    assert not [p for p in cache_dir.iterdir() if ".tmp-" in p.name]


@pytest.mark.fork
def test_loader_workers_read_the_cached_copy(packed, tmp_path):
    pytest.importorskip("torch")
    store, ref = packed
    cache_dir = tmp_path / "shm"
    ds = H5Dataset(store, cache_dir=cache_dir, trace_dir=tmp_path / "trace")
    loader = make_loader(ds, batch_size=40, num_workers=2, multiprocessing_context=fork_here(), shuffle=False)
    got = np.concatenate([b["x"].numpy() for b in loader])
    np.testing.assert_array_equal(got, ref["x"])
    entry = NodeCache(cache_dir).entry(store)
    opened = [line for p in (tmp_path / "trace").glob("io-*.jsonl") for line in p.read_text().splitlines()
              if '"open"' in line]
    assert len(opened) == 2 and all(str(entry) in line for line in opened)


def test_store_that_does_not_fit_falls_back_to_the_original(packed, tmp_path, caplog):
    store, ref = packed
    with caplog.at_level(logging.WARNING, logger="trajscale.storage.nodecache"):
        e = NodeCache(tmp_path / "tiny", max_bytes=1000).open(store)
    assert e.path == store and not e.copied
    assert "does not fit" in caplog.text
    np.testing.assert_array_equal(H5Dataset(store, cache_dir=tmp_path / "tiny", cache_bytes=1000)[5]["x"],
                                  ref["x"][5])


def test_lru_eviction_skips_entries_in_use(tmp_path, npz_set):
    from trajscale.ml.pack import pack

    paths, _ = npz_set
    stores = []
    for i in range(3):
        s = tmp_path / f"s{i}.h5"
        pack(paths[: 2 + i], s)
        stores.append(str(s))
    sizes = [os.path.getsize(s) for s in stores]
    cache = NodeCache(tmp_path / "c", max_bytes=sizes[0] + sizes[2] + 100)   # room for 0 and 2, not all three
    held = cache.open(stores[0])
    assert held.copied
    cache.open(stores[1]).close()
    os.utime(cache.entry(stores[0]), (1, 1))   # the least recently used, but in use: kept
    os.utime(cache.entry(stores[1]), (2, 2))   # the next: evicted
    l2 = cache.open(stores[2])
    names = {p.name for p in cache.entries()}
    assert cache.entry(stores[0]).name in names and cache.entry(stores[2]).name in names
    assert cache.entry(stores[1]).name not in names
    held.close()
    l2.close()


def test_corrupt_cached_copy_is_one_clear_error(packed, tmp_path):
    store, _ = packed
    cache = NodeCache(tmp_path / "c")
    e = cache.open(store)
    e.close()
    os.truncate(e.path, os.path.getsize(e.path) // 2)
    with pytest.raises(InputFileError, match=r"cached copy of .*store\.h5 is corrupt.*delete it"):
        H5Dataset(store, cache_dir=tmp_path / "c")[0]


def test_store_rewritten_gets_a_new_entry_and_old_datasets_fail(packed, tmp_path, npz_set):
    from trajscale.ml.pack import pack

    store, _ = packed
    ds = H5Dataset(store, cache_dir=tmp_path / "c")
    ds[0]
    old_entry = NodeCache(tmp_path / "c").entry(store)
    paths, _ = npz_set
    pack(paths[:2], tmp_path / "new.h5")
    os.replace(tmp_path / "new.h5", store)
    assert NodeCache(tmp_path / "c").entry(store) != old_entry
    ds.close()
    with pytest.raises(InputFileError, match="changed since the dataset was made"):
        ds[0]
    fresh = H5Dataset(store, cache_dir=tmp_path / "c")
    np.testing.assert_array_equal(fresh[[0, 79]]["x"], np.concatenate([np.load(p)["x"] for p in paths[:2]])[[0, 79]])
