"""Training data for PyTorch from HDF5 (Devarajan, HUG 2024): pack, load in blocks, cache on the node, trace.

Map-style datasets (a packed store, a trajectory, an ensemble's members, time-lagged pairs) read whole
batches in a few contiguous reads; deeptime's estimators are fed chunk by chunk (:func:`stream_fit`).
torch is needed only by :func:`make_loader`.  Names are imported on first use (:mod:`trajscale._lazy`).
"""

from __future__ import annotations

from .._lazy import attach

__all__ = ["BlockBatchSampler", "EnsembleDataset", "FeatureStream", "FrameDataset", "H5Dataset", "LaggedDataset",
           "LaggedEnsembleDataset", "LoopTimer", "NodeCache", "PackSummary", "lagged_chunks", "lagged_pairs",
           "load_report", "make_loader", "pack", "plan_pack", "stream_fit", "stream_transform", "summary",
           "write_loader_trace"]

__getattr__, __dir__ = attach(__name__, {
    "NodeCache": "..storage.nodecache", "EnsembleDataset": ".ensemble", "FrameDataset": ".dataset",
    "H5Dataset": ".dataset", "make_loader": ".dataset", "FeatureStream": ".lagged", "lagged_chunks": ".lagged",
    "lagged_pairs": ".lagged",
    "stream_transform": ".lagged", "LaggedDataset": ".lagged_dataset", "LaggedEnsembleDataset": ".lagged_dataset",
    "stream_fit": ".streaming",
    "PackSummary": ".pack", "pack": ".pack", "plan_pack": ".pack", "BlockBatchSampler": ".sampler",
    "LoopTimer": ".trace", "load_report": ".trace", "summary": ".trace", "write_loader_trace": ".trace",
}, submodules=("dataset", "ensemble", "lagged", "lagged_dataset", "sampler", "streaming", "trace"))
