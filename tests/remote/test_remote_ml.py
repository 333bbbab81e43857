"""The PyTorch loader over a packed store behind a URL (a real S3 server): the object is fetched once into
the node-local cache, keyed by its ETag and size, and the loader gives the same samples as from the file."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

ML_BUCKET = "ml-data"

pytestmark = pytest.mark.remote


def _first_user(url, options, cache_dir, barrier, queue):
    from trajscale.storage.location import Location
    from trajscale.storage.nodecache import NodeCache

    barrier.wait()
    entry = NodeCache(cache_dir).open(Location(url, options))
    with open(entry.path, "rb") as fh:
        queue.put((entry.copied, entry.path, fh.read()))
    entry.close()


@pytest.fixture
def packed_url(s3_server, tmp_path):
    """(URL, storage options, the NPZ originals concatenated with np.load) of a small store made by pack."""
    from tests.ml.conftest import write_npz_set
    from trajscale.ml.pack import pack

    paths, _ = write_npz_set(tmp_path)
    store = tmp_path / "store.h5"
    pack(paths, store)
    client = s3_server.client()
    if ML_BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=ML_BUCKET)
    key = f"{tmp_path.name}/store.h5"   # each test its own object
    client.upload_file(str(store), ML_BUCKET, key)
    ref = {k: np.concatenate([np.load(p)[k] for p in paths]) for k in ("x", "y")}
    options = {"endpoint_url": s3_server.endpoint, "key": "testing", "secret": "testing-secret-do-not-print",
               "region_name": "us-east-1"}
    return f"s3://{ML_BUCKET}/{key}", options, ref, str(store)


def test_the_loader_gives_the_local_files_samples_from_a_url(packed_url, tmp_path):
    pytest.importorskip("torch")
    from trajscale.ml import H5Dataset, make_loader

    url, options, ref, local = packed_url
    cache_dir = tmp_path / "node"
    ds = H5Dataset(url, cache_dir=cache_dir, storage_options=options, trace_dir=tmp_path / "trace")
    here = H5Dataset(local)
    assert len(ds) == len(here) == len(ref["x"]) and ds.keys == here.keys
    loader = make_loader(ds, batch_size=40, num_workers=2, shuffle=True, seed=3)   # started as the rule says
    local_loader = make_loader(here, batch_size=40, shuffle=True, seed=3)
    for got, want in zip(loader, local_loader, strict=True):
        for k in ("x", "y"):
            np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())
    got = np.concatenate([b["x"].numpy() for b in make_loader(ds, batch_size=64, shuffle=False)])
    np.testing.assert_array_equal(got, ref["x"])   # np.load of the NPZ files: the reference
    entries = [p for p in cache_dir.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and entries[0].read_bytes() == open(local, "rb").read()   # fetched once
    opened = [line for p in (tmp_path / "trace").glob("io-*.jsonl") for line in p.read_text().splitlines()
              if '"open"' in line]
    assert opened and all(str(entries[0]) in line for line in opened)   # every worker read the node's copy
    for p in cache_dir.iterdir():   # the credentials are nowhere in the cache
        assert b"testing-secret-do-not-print" not in p.read_bytes()


def test_concurrent_first_users_fetch_the_object_once(packed_url, tmp_path):
    url, options, _, local = packed_url
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_first_user, args=(url, options, str(tmp_path / "node"), barrier, queue))
             for _ in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    want = open(local, "rb").read()
    assert sorted(r[0] for r in results) == [False, False, True]   # one fetcher
    assert len({r[1] for r in results}) == 1 and all(r[2] == want for r in results)
    assert not [p for p in (tmp_path / "node").iterdir() if ".tmp-" in p.name]


def test_a_replaced_object_gets_a_new_entry_and_old_datasets_are_refused(packed_url, s3_server, tmp_path):
    from trajscale.errors import StoreError
    from trajscale.ml import H5Dataset

    url, options, ref, local = packed_url
    cache_dir = tmp_path / "node"
    old = H5Dataset(url, cache_dir=cache_dir, storage_options=options)
    np.testing.assert_array_equal(old[3]["x"], ref["x"][3])
    old.close()
    for p in cache_dir.iterdir():   # the node's copy gone (evicted): the old dataset must fetch again
        p.unlink()
    import h5py

    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = np.zeros((5, 2))
    s3_server.client().upload_file(str(other), ML_BUCKET, url.split("/", 3)[3])
    with pytest.raises(StoreError, match="replaced"):
        old[0]
    from trajscale.storage import objects

    objects.forget_heads()   # the process keeps an object's first bytes a few seconds: a new look
    new = H5Dataset(url, cache_dir=cache_dir, storage_options=options)
    assert len(new) == 5


def test_a_missing_object_is_one_line(packed_url, s3_server, tmp_path):
    from trajscale.errors import StoreError
    from trajscale.ml import H5Dataset

    options = packed_url[1]
    url = f"s3://{ML_BUCKET}/missing.h5"
    with pytest.raises(StoreError) as caught:
        H5Dataset(url, cache_dir=tmp_path / "node", storage_options=options)
    assert str(caught.value).startswith(url) and "no such" in str(caught.value)
