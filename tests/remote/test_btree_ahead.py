"""HDF5 walks a chunk index's B-tree one node after another; behind a URL each node is a round trip. When
it reads a node above the leaves, trajscale's file object fetches the blocks of all its children at once.
Opening an H5MD file behind a URL starts fetching what a frame's box, time and step are read from, so the
first frame read (a run's reference) does not wait for them in turn after its positions."""

from __future__ import annotations

import mmap
import re
import time

import h5py
import numpy as np
import pytest

from tests.conftest import run_cli_here
from trajscale.hdf5.metadata import btree_children, chunk_index_root
from trajscale.storage.fileobj import BLOCK_BYTES

from .conftest import TPR, XTC

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
    from trajscale.hdf5.metadata import open_store_h5
    from trajscale.storage.objects import RemoteObject

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
        obj = RemoteObject.open("s3://btree-ahead/many.h5", {"endpoint_url": proxy.endpoint})
        _fh, f = open_store_h5(obj, True, None, 1024**2, use_cache=False)
        stored = f["x"].id.get_storage_size()
        got = f["x"][[0, 399]]
        f.close()
    finally:
        proxy.close()
    assert stored == 400 * 5461 * 3 * 4
    assert np.array_equal(got, np.stack([np.zeros((5461, 3)), np.full((5461, 3), 399)]).astype("f4"))
    assert proxy.flight["most"] >= len({a // (256 * 1024) for a in leaves}) - 1


def test_the_leaves_below_a_root_node_at_hand_are_fetched_ahead(s3_env, tmp_path):
    """A dataset just opened, its chunk index's root node among the bytes at hand (the file's first block):
    asking to fetch ahead what reading it needs sends for every leaf's block, before HDF5 reads anything."""
    from trajscale.hdf5.metadata import fetch_ahead, open_store_h5
    from trajscale.storage.objects import RemoteObject

    path = _chunked(tmp_path / "small.h5", (400, 300, 3), (1, 300, 3))   # 3.6 kB chunks: leaves 230 kB apart
    nodes = _nodes(path)
    assert [a for a, (level, _) in nodes.items() if level == 1][0] < BLOCK_BYTES
    leaves = {a // BLOCK_BYTES for a, (level, _) in nodes.items() if level == 0} - {0}
    assert len(leaves) >= 3
    client = s3_env.client()
    if "btree-ahead" not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket="btree-ahead")
    client.upload_file(str(path), "btree-ahead", "small.h5")
    obj = RemoteObject.open("s3://btree-ahead/small.h5", None)
    fh, f = open_store_h5(obj, True, None, 1024**2, use_cache=False)
    try:
        fetch_ahead(fh, [f["x"]])
        sent = sorted(a // BLOCK_BYTES for a, _ in obj._ahead)   # (requests started ahead, by range)
        got = f["x"][[0, 399]]
    finally:
        f.close()
    assert sent == sorted(leaves)   # each leaf's block, once
    assert np.array_equal(got, np.stack([np.zeros((300, 3)), np.full((300, 3), 399)]).astype("f4"))


def _blocks_of_chunks(path, names) -> set[int]:
    """The numbers of the file object's blocks holding the chunks of datasets ``names`` (h5py's addresses)."""
    with h5py.File(path, "r") as f:
        chunks = [c for name in names for c in map(f[name].id.get_chunk_info, range(f[name].id.get_num_chunks()))]
    return {k for c in chunks
            for k in range(c.byte_offset // BLOCK_BYTES, (c.byte_offset + c.size - 1) // BLOCK_BYTES + 1)}


def test_a_chunk_index_root_is_read_from_the_object_header(tmp_path):
    """The address in a version-1 object header's layout message is where HDF5 finds the dataset's first
    chunk through its B-tree (the node's signature is there); other headers and layouts give None."""
    path = _chunked(tmp_path / "c.h5", (100, 7), (10, 7))
    with h5py.File(path, "a") as f:
        f.create_dataset("flat", data=np.arange(5.0))
    with h5py.File(path, "r") as f:
        chunked, flat = (h5py.h5g.get_objinfo(f[n].id).objno[0] for n in ("x", "flat"))
    with open(path, "rb") as fh:
        data = fh.read()
    root = chunk_index_root(data[chunked:chunked + 4096], 8)
    assert root is not None and data[root:root + 5] == b"TREE\x01"
    assert chunk_index_root(data[flat:flat + 4096], 8) is None   # contiguous
    assert chunk_index_root(b"\x02" + data[chunked + 1:chunked + 4096], 8) is None   # not a version-1 header
    assert chunk_index_root(data[chunked:chunked + 20], 8) is None   # cut short
    rng = np.random.default_rng(7)   # damaged headers and nodes: an address or nothing, never an error
    header = bytearray(data[chunked:chunked + 512])
    for _ in range(2000):
        bad = bytearray(header)
        for at in rng.integers(0, len(bad), 4):
            bad[at] = int(rng.integers(0, 256))
        got = chunk_index_root(bytes(bad[:int(rng.integers(0, len(bad)))]), 8)
        assert got is None or 0 <= got < 2**64
        assert isinstance(btree_children(b"TREE\x01\x01" + bytes(bad), 8, 10**9), list)


@pytest.mark.parametrize("layout", ["disk", "remote"])
def test_a_first_frame_finds_its_box_and_time_fetched_ahead(s3_env, tmp_path, monkeypatch, layout):
    """Behind a proxy that holds each request 0.5 s: once the file is open, the blocks holding the chunks of
    box, time and step have been asked for; reading the first frame (positions, box, time, step, equal to
    h5py's on the local file) asks for none of them again, so they never wait behind its positions. What is
    asked for ahead is their B-tree nodes and written rows, a few kB, not the blocks holding them."""
    from MDAnalysis.lib.mdamath import triclinic_box

    from trajscale.h5md.source import H5MDSource

    from .conftest import FlakyProxy

    path = tmp_path / f"adk_{layout}.h5md"
    proc = run_cli_here("convert", TPR, XTC, "-o", str(path), "--layout", layout, "-q")
    assert proc.returncode == 0, proc.stderr
    edges = "particles/all/box/edges"
    meta_blocks = _blocks_of_chunks(path, [f"{edges}/value", f"{edges}/time", f"{edges}/step"])
    client = s3_env.client()
    if "meta-ahead" not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket="meta-ahead")
    client.upload_file(str(path), "meta-ahead", path.name)
    monkeypatch.setenv("TRAJSCALE_CACHE_DIR", str(tmp_path / "cache"))   # a first run on the object
    proxy = FlakyProxy(s3_env.endpoint, failures=100_000, how="delay", delay=0.5)
    try:
        src = H5MDSource(f"s3://meta-ahead/{path.name}", storage_options={"endpoint_url": proxy.endpoint})
        try:
            time.sleep(0.3)   # (requests started ahead reach the proxy)
            ahead = list(proxy.gets)
            block = src.read(0, 1)
            during = proxy.gets[len(ahead):]
        finally:
            src.close()
    finally:
        proxy.close()

    def blocks(gets):
        return {int(r.split("=")[1].split("-")[0]) // BLOCK_BYTES for _, r in gets if r}

    with h5py.File(path, "r") as f:
        assert np.array_equal(block.positions[0], f["particles/all/position/value"][0])
        assert block.time[0] == f[f"{edges}/time"][0] and block.step[0] == f[f"{edges}/step"][0]
        assert np.allclose(block.box[0], triclinic_box(*f[f"{edges}/value"][0].astype("f8")), rtol=1e-5)
    assert meta_blocks <= blocks(ahead) | {0}, (sorted(meta_blocks), ahead)
    assert not meta_blocks & blocks(during) - {0}, during
    spans = [[int(x) for x in r.split("=")[1].split("-")] for _, r in ahead if r and not r.startswith("bytes=0-")]
    assert 0 < sum(b + 1 - a for a, b in spans) <= 64 * 1024, ahead
