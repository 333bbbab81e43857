"""HDF5 walks a chunk index's B-tree one node after another; behind a URL each node is a round trip. When
it reads a node above the leaves, trajscale's file object fetches the blocks of all its children at once."""

from __future__ import annotations

import mmap
import re

import h5py
import numpy as np
import pytest

from trajscale.storage.fileobj import btree_children

pytestmark = pytest.mark.remote


def _chunked(path, shape, chunks):
    """An HDF5 file of one chunked dataset (float32), each chunk written: many B-tree leaves."""
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("x", shape=shape, chunks=chunks, dtype="f4", maxshape=(None, *shape[1:]))
        for i in range(0, shape[0], chunks[0]):
            ds[i:i + chunks[0]] = i
    return path


def _nodes(path) -> dict[int, tuple[int, int]]:
    """Every version-1 B-tree node of raw-data chunks in the file: address -> (level, entries)."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return {x.start(): (m[x.start() + 5], int.from_bytes(m[x.start() + 6:x.start() + 8], "little"))
                for x in re.finditer(rb"TREE\x01", m)}


@pytest.mark.parametrize("shape, chunks", [((3000,), (4,)), ((900, 40), (1, 40)), ((700, 30, 3), (1, 30, 3))])
def test_the_children_of_a_node_above_the_leaves_are_its_leaves(tmp_path, shape, chunks):
    """Parsed from the node's keys, for datasets of rank 1 to 3: exactly the file's leaves (found by their
    signature), each once."""
    path = _chunked(tmp_path / "c.h5", shape, chunks)
    nodes = _nodes(path)
    roots = [a for a, (level, _) in nodes.items() if level == 1]
    leaves = sorted(a for a, (level, _) in nodes.items() if level == 0)
    assert len(roots) == 1 and len(leaves) >= 5
    with open(path, "rb") as fh:
        fh.seek(roots[0])
        node = fh.read(8192)
        size = fh.seek(0, 2)
    assert sorted(btree_children(node, 8, size)) == leaves
    for leaf in leaves[:2]:
        with open(path, "rb") as fh:
            fh.seek(leaf)
            assert btree_children(fh.read(8192), 8, size) == []   # a leaf's children are chunks
    assert btree_children(b"TREE\x00\x01" + node[6:], 8, size) == []   # a group's B-tree
    assert btree_children(node[:40], 8, size) == []   # cut short
    assert btree_children(node, 8, 1000) == []   # children outside the file


def test_opening_a_store_fetches_the_leaves_together(s3_env, tmp_path):
    """Behind a proxy that holds every request 0.3 s, the walk HDF5 makes to size a dataset has all of its
    leaves' blocks in flight at once, and the bytes are the file's."""
    from trajscale.storage.hdf5 import open_remote_h5

    from .conftest import FlakyProxy

    path = _chunked(tmp_path / "many.h5", (400, 5461, 3), (1, 5461, 3))   # 64 kB chunks: leaves 4 MB apart
    leaves = [a for a, (level, _) in _nodes(path).items() if level == 0]
    assert len({a // (256 * 1024) for a in leaves}) >= 5
    client = s3_env.client()
    if "btree-ahead" not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket="btree-ahead")
    client.upload_file(str(path), "btree-ahead", "many.h5")
    proxy = FlakyProxy(s3_env.endpoint, failures=100_000, how="delay", delay=0.3)
    try:
        _obj, _fh, f = open_remote_h5("s3://btree-ahead/many.h5", {"endpoint_url": proxy.endpoint}, None, 1024**2,
                                      use_cache=False)
        stored = f["x"].id.get_storage_size()
        got = f["x"][[0, 399]]
        f.close()
    finally:
        proxy.close()
    assert stored == 400 * 5461 * 3 * 4
    assert np.array_equal(got, np.stack([np.zeros((5461, 3)), np.full((5461, 3), 399)]).astype("f4"))
    assert proxy.flight["most"] >= len({a // (256 * 1024) for a in leaves}) - 1
