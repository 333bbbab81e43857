"""Training data for PyTorch from HDF5 (Devarajan, HUG 2024): pack, load in blocks, cache on the node, trace.

``pack`` turns many NPZ / .npy sample files into one HDF5 store;
:class:`H5Dataset` and :class:`FrameDataset` serve a store or an MD trajectory
as map-style datasets that read whole batches in a few contiguous reads, with
:class:`BlockBatchSampler` shuffling by blocks; :class:`EnsembleDataset` serves the
frames of many trajectories (an ensemble: H5MD files, mdCATH members, ...) the same way;
:class:`NodeCache` keeps a node-local copy shared by a node's workers; :mod:`.trace` records the I/O.
torch is needed only by :func:`make_loader` (imported there). Names are
imported on first use (:mod:`trajscale._lazy`).
"""

from __future__ import annotations

from .._lazy import attach

__all__ = ["BlockBatchSampler", "EnsembleDataset", "FrameDataset", "H5Dataset", "LoopTimer", "NodeCache",
           "PackSummary", "load_report", "make_loader", "pack", "plan_pack", "summary", "write_loader_trace"]

__getattr__, __dir__ = attach(__name__, {
    "NodeCache": ".cache", "EnsembleDataset": ".ensemble", "FrameDataset": ".dataset", "H5Dataset": ".dataset",
    "make_loader": ".dataset",
    "PackSummary": ".pack", "pack": ".pack", "plan_pack": ".pack", "BlockBatchSampler": ".sampler",
    "LoopTimer": ".trace", "load_report": ".trace", "summary": ".trace", "write_loader_trace": ".trace",
}, submodules=("cache", "dataset", "ensemble", "sampler", "trace"))
