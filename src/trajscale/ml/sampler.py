"""Shuffled batches that read as a few contiguous runs.

A uniformly shuffled batch of 256 samples is 256 point reads.  :class:`BlockBatchSampler` shuffles the
order of contiguous blocks of samples and cuts the result into batches: every sample still comes once per
epoch, a batch is at most ``batch_size / block + 1`` contiguous reads, and with ``block < batch_size`` a
batch mixes different blocks every epoch.  Inside a batch the indices come sorted (a gradient does not
depend on their order, and sorted indices read as slabs with no permuting copy).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import ConfigError


class BlockBatchSampler:
    """Index lists for whole batches, shuffled by blocks; sharded by rank like ``DistributedSampler``.

    Parameters
    ----------
    n
        Number of samples.
    batch_size
        Samples per batch.
    shuffle
        Shuffle block order and samples inside each batch (else in order).
    block
        Contiguous samples that stay together (default ``batch_size // 4``; ``batch_size`` makes each batch
        one contiguous run, the same samples every epoch).
    seed
        Base seed; epoch ``e`` uses ``seed + e`` (:meth:`set_epoch`), the same on every rank.
    drop_last
        Drop the last incomplete batch; with several ranks, also the batches that do not divide evenly (else
        they are padded from the start of the epoch, so every rank runs the same number of steps).
    rank, world_size
        This process's shard: batch ``i`` goes to rank ``i % world_size``.
    shuffle_within
        Shuffle the indices inside each batch too (else sorted).
    """

    def __init__(self, n: int, batch_size: int, shuffle: bool = True, block: int | None = None,
                 seed: int = 0, drop_last: bool = False, rank: int = 0, world_size: int = 1,
                 shuffle_within: bool = False) -> None:
        if batch_size < 1 or n < 0:
            raise ConfigError(f"batch_size must be >= 1 and n >= 0 (got {batch_size}, {n})")
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} outside world_size {world_size}")
        self.n, self.batch_size = int(n), int(batch_size)
        self.block = int(block or max(1, batch_size // 4))
        if self.block < 1:
            raise ConfigError(f"block must be >= 1 (got {block})")
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self.shuffle_within = shuffle_within
        self.rank, self.world_size = int(rank), int(world_size)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s order (call before each epoch, as with ``DistributedSampler``)."""
        self.epoch = int(epoch)

    def order(self) -> np.ndarray:
        """This epoch's order of all samples (every rank computes the same one)."""
        if not self.shuffle:
            return np.arange(self.n, dtype=np.int64)
        rng = np.random.default_rng(self.seed + self.epoch)
        n_blocks = -(-self.n // self.block)
        starts = rng.permutation(n_blocks).astype(np.int64) * self.block
        lengths = np.minimum(self.block, self.n - starts)
        # Concatenate the permuted blocks without a Python loop per block.
        order = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        order += np.arange(self.n, dtype=np.int64)
        # Each batch-sized window sorted (or shuffled): pad to whole windows, sort rows, drop the pad.
        b = self.batch_size
        padded = np.full(-(-self.n // b) * b, np.iinfo(np.int64).max, np.int64)
        padded[:self.n] = order
        rows = padded.reshape(-1, b)
        rows = rng.permuted(rows, axis=1) if self.shuffle_within else np.sort(rows, axis=1)
        flat = rows.reshape(-1)
        return flat[flat < self.n]

    def _batches(self) -> list[np.ndarray]:
        order = self.order()
        b = self.batch_size
        n_full = self.n // b
        batches = [order[i * b:(i + 1) * b] for i in range(n_full)]
        if self.n % b and not self.drop_last:
            batches.append(order[n_full * b:])
        if self.world_size > 1 and batches:
            extra = len(batches) % self.world_size
            if extra and self.drop_last:
                batches = batches[:len(batches) - extra]
            elif extra:
                batches += batches[:self.world_size - extra]
        return batches[self.rank::self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self._batches():
            yield batch.tolist()

    def __len__(self) -> int:
        n_batches = self.n // self.batch_size + (1 if self.n % self.batch_size and not self.drop_last else 0)
        if self.world_size > 1:
            n_batches = n_batches // self.world_size if self.drop_last else -(-n_batches // self.world_size)
        return n_batches


__all__ = ["BlockBatchSampler"]
