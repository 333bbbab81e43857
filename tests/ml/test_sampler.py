"""BlockBatchSampler: every sample once per epoch, batches as few contiguous runs, shards by rank."""

from __future__ import annotations

import numpy as np
import pytest

from trajscale.ml.dataset import runs
from trajscale.ml.sampler import BlockBatchSampler


@pytest.mark.parametrize("n,batch,block", [(1000, 64, None), (1000, 64, 16), (97, 10, 7), (5, 8, None)])
def test_every_sample_once_and_few_runs(n, batch, block):
    s = BlockBatchSampler(n, batch, block=block, seed=3)
    batches = list(s)
    assert len(batches) == len(s) == -(-n // batch)
    flat = np.concatenate(batches)
    np.testing.assert_array_equal(np.sort(flat), np.arange(n))
    blk = block or max(1, batch // 4)
    for b in batches:
        # a batch covers at most ceil(batch/block) + 1 blocks, so that many contiguous runs
        assert runs(np.unique(b))[0].size <= -(-batch // blk) + 1
    assert not np.array_equal(flat, np.arange(n)) or n <= batch   # shuffled (one batch comes sorted)
    assert all(np.all(np.diff(b) > 0) for b in batches)   # sorted inside a batch: slabs, no permuting copy


def test_epochs_differ_and_seed_repeats():
    s = BlockBatchSampler(500, 50, seed=1)
    e0 = np.concatenate(list(s))
    s.set_epoch(1)
    e1 = np.concatenate(list(s))
    assert not np.array_equal(e0, e1)
    t = BlockBatchSampler(500, 50, seed=1)
    np.testing.assert_array_equal(np.concatenate(list(t)), e0)
    np.testing.assert_array_equal(np.concatenate(list(BlockBatchSampler(500, 50, shuffle=False))), np.arange(500))


def test_drop_last():
    s = BlockBatchSampler(105, 10, drop_last=True)
    batches = list(s)
    assert len(batches) == len(s) == 10 and all(len(b) == 10 for b in batches)


@pytest.mark.parametrize("n,world,drop_last", [(1200, 3, False), (1000, 3, False), (1000, 3, True)])
def test_shards_like_distributed_sampler(n, world, drop_last):
    shards = [list(BlockBatchSampler(n, 64, seed=5, rank=r, world_size=world, drop_last=drop_last))
              for r in range(world)]
    lengths = {len(sh) for sh in shards}
    assert len(lengths) == 1 and lengths.pop() == len(BlockBatchSampler(n, 64, rank=0, world_size=world,
                                                                         drop_last=drop_last))
    flat = np.concatenate([np.concatenate(sh) for sh in shards])
    if n % (64 * world) == 0:   # divides: exactly once over all ranks
        np.testing.assert_array_equal(np.sort(flat), np.arange(n))
    elif drop_last:             # disjoint, some left out
        assert np.unique(flat).size == flat.size < n
    else:                       # padded from the start: all covered, a few twice
        assert set(flat.tolist()) == set(range(n)) and flat.size > n


def test_batch_composition_changes_between_epochs_and_shuffle_within():
    s = BlockBatchSampler(1024, 64, seed=0)   # default block 16: a batch mixes 4 blocks
    e0 = {tuple(b) for b in s}
    s.set_epoch(1)
    e1 = {tuple(b) for b in s}
    assert len(e0 & e1) < len(e0) // 2
    w = list(BlockBatchSampler(1024, 64, seed=0, shuffle_within=True))
    assert any(np.any(np.diff(b) < 0) for b in w)
    assert [sorted(b) for b in w] == [list(b) for b in BlockBatchSampler(1024, 64, seed=0)]
