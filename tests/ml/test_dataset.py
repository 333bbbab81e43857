"""H5Dataset with real torch DataLoaders: every sample once, in the sampler's order, equal to the NPZ originals."""

from __future__ import annotations

import importlib.util
import os

import h5py
import numpy as np
import pytest

from tests.executors import fork_here
from trajscale.errors import InputFileError, StoreError
from trajscale.ml import BlockBatchSampler, H5Dataset, make_loader
from trajscale.ml.pack import pack

# torch is imported by the tests that use it, not when the module is collected (a second of CPU in
# each of the suite's processes)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


def _epoch(loader) -> dict[str, np.ndarray]:
    import torch

    out: dict[str, list] = {}
    for batch in loader:
        assert isinstance(batch["x"], torch.Tensor)
        for k, v in batch.items():
            out.setdefault(k, []).append(v.numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def _expected_order(n, batch_size, epoch=0, **kw):
    s = BlockBatchSampler(n, batch_size, seed=7, **kw)
    s.set_epoch(epoch)
    return np.concatenate(list(s))


@pytest.mark.fork
@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("workers,context", [(0, None), (2, "fork"), (2, "spawn")])
def test_epoch_in_sampler_order_equals_originals(packed, workers, context):
    store, ref = packed
    ds = H5Dataset(store, with_index=True)
    loader = make_loader(ds, batch_size=32, block=16, seed=7, num_workers=workers,
                         multiprocessing_context=fork_here() if context == "fork" else context,
                         persistent_workers=True)
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        got = _epoch(loader)
        order = _expected_order(len(ds), 32, epoch, block=16)
        np.testing.assert_array_equal(np.sort(got["index"]), np.arange(len(ds)))   # each sample once
        np.testing.assert_array_equal(got["index"], order)
        np.testing.assert_array_equal(got["x"], ref["x"][order])
        np.testing.assert_array_equal(got["y"], ref["y"][order])


@pytest.mark.fork
def test_parent_handle_is_not_shared_across_fork(packed):
    store, ref = packed
    ds = H5Dataset(store)
    ds[0]   # the parent opens its handle first
    parent_file = ds._file
    loader = make_loader(ds, batch_size=50, num_workers=2, multiprocessing_context=fork_here(), shuffle=False)
    got = _epoch(loader)
    np.testing.assert_array_equal(got["x"], ref["x"])
    assert ds._file is parent_file and ds._pid == os.getpid()


@pytest.mark.fork
def test_sharded_by_rank_covers_every_sample_once(packed):
    store, ref = packed
    seen = []
    for rank in range(2):
        loader = make_loader(H5Dataset(store, with_index=True), batch_size=30, seed=2, rank=rank, world_size=2,
                             num_workers=1, multiprocessing_context=fork_here())
        got = _epoch(loader)
        np.testing.assert_array_equal(got["x"], ref["x"][got["index"]])
        seen.append(got["index"])
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(len(ref["x"])))   # 240 = 8 x 30
    assert not set(seen[0]) & set(seen[1])


def test_default_dataloader_with_getitems_and_pinned(packed):
    from torch.utils.data import DataLoader

    store, ref = packed
    loader = DataLoader(H5Dataset(store), batch_sampler=BlockBatchSampler(240, 64, seed=1))
    got = {k: [] for k in ("x", "y")}
    for b in loader:   # torch's own collation of the samples __getitems__ returns
        for k in got:
            got[k].append(b[k].numpy())
    order = np.concatenate(list(BlockBatchSampler(240, 64, seed=1)))
    np.testing.assert_array_equal(np.concatenate(got["x"]), ref["x"][order])
    import torch

    pinned = make_loader(H5Dataset(store), batch_size=64, pin_memory=torch.cuda.is_available())
    assert sum(b["x"].shape[0] for b in pinned) == 240


def test_single_samples_random_order_and_transform(packed):
    store, ref = packed
    ds = H5Dataset(store, keys=["x"], transform=lambda d: {"x2": d["x"] * 2})
    assert len(ds) == 240
    np.testing.assert_array_equal(ds[17]["x2"], ref["x"][17] * 2)
    idx = [200, 3, 3, 150, 0, -1]
    np.testing.assert_array_equal(ds[idx]["x2"], ref["x"][idx] * 2)
    with pytest.raises(IndexError):
        ds[240]


@pytest.mark.fork
def test_chunked_compressed_store_reads_through_hdf5(tmp_path, npz_set):
    paths, _ = npz_set
    pack(paths, tmp_path / "c.h5", chunks=16, compression="gzip:1")
    ref = np.concatenate([np.load(p)["x"] for p in paths])
    ds = H5Dataset(tmp_path / "c.h5")
    idx = np.array([5, 6, 7, 100, 30, 31, 239])
    np.testing.assert_array_equal(ds[idx]["x"], ref[idx])
    assert not ds._maps   # went through read_direct
    np.testing.assert_array_equal(_epoch(make_loader(ds, batch_size=40, num_workers=2,
                                                     multiprocessing_context=fork_here(), shuffle=False))["x"], ref)


def test_numpy_batches_without_torch_loader(packed):
    store, ref = packed
    ds = H5Dataset(store)
    s = BlockBatchSampler(len(ds), 50, seed=4)
    got = np.concatenate([b["x"] for b in ds.batches(s)])
    np.testing.assert_array_equal(got, ref["x"][np.concatenate(list(s))])


def test_missing_key_names_store_and_key(packed):
    store, _ = packed
    with pytest.raises(InputFileError, match=r"store\.h5: has no key 'nope' \(keys: x, y\)"):
        H5Dataset(store, keys=["x", "nope"])


def test_truncated_store_is_one_clear_error(packed, tmp_path):
    store, _ = packed
    cut = tmp_path / "cut.h5"
    data = open(store, "rb").read()
    cut.write_bytes(data[: len(data) - 5000])
    with pytest.raises(InputFileError, match=r"cut\.h5: (truncated|cannot open)"):
        H5Dataset(cut)


@pytest.mark.fork
def test_store_changed_after_the_dataset_was_made(packed, tmp_path, npz_set):
    store, _ = packed
    ds = H5Dataset(store)
    paths, _ = npz_set
    pack(paths[:3], tmp_path / "other.h5")
    os.replace(tmp_path / "other.h5", store)
    loader = make_loader(ds, batch_size=40, num_workers=2, multiprocessing_context=fork_here())
    with pytest.raises(StoreError, match="changed since the dataset was made"):
        _epoch(loader)


@pytest.mark.slow
def test_store_truncated_after_the_dataset_was_made(packed):
    store, _ = packed
    ds = H5Dataset(store)
    with h5py.File(store) as f:
        end = f["x"].id.get_offset() + 100
    os.truncate(store, end)
    with pytest.raises(InputFileError, match="store.h5"):
        ds[0]


def _where(batch):   # runs in the worker, on what the dataset returned
    import torch

    return {"shared": torch.tensor([isinstance(batch["x"], torch.Tensor) and batch["x"].is_shared()])}


@pytest.mark.fork
def test_worker_batches_are_read_into_shared_memory(packed):
    from torch.utils.data import DataLoader

    store, _ = packed
    sampler = BlockBatchSampler(240, 40, seed=0)
    loader = DataLoader(H5Dataset(store), sampler=sampler, batch_size=None, num_workers=1,
                        multiprocessing_context=fork_here(), collate_fn=_where)
    assert all(bool(b["shared"]) for b in loader)
    in_process = DataLoader(H5Dataset(store), sampler=sampler, batch_size=None, collate_fn=_where)
    assert not any(bool(b["shared"]) for b in in_process)   # NumPy outside workers
