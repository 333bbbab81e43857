"""Loader I/O trace: per-process opens, reads and bytes; wait vs compute; a Perfetto trace."""

from __future__ import annotations

import importlib.util
import json
import os
import time

import pytest

from tests.executors import fork_here
from trajscale.errors import InputFileError
from trajscale.ml import H5Dataset, LoopTimer, make_loader, summary, write_loader_trace
from trajscale.ml.trace import format_summary

# torch is imported by the tests that use it, not when the module is collected (a second of CPU in
# each of the suite's processes)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


@pytest.mark.fork
def test_two_workers_each_open_once_and_bytes_add_up(packed, tmp_path):
    store, ref = packed
    trace_dir = tmp_path / "trace"
    ds = H5Dataset(store, trace_dir=trace_dir)
    ds[0]   # the parent opens too; forked workers must open their own handle
    loader = make_loader(ds, batch_size=40, block=20, num_workers=2, multiprocessing_context=fork_here())
    timer = LoopTimer(trace_dir)
    n = 0
    for batch in timer.iterate(loader):
        time.sleep(0.01)   # the "training step"
        n += batch["x"].shape[0]
    assert n == 240 and timer.batches == 6
    assert timer.t_compute >= 0.05
    s = summary(trace_dir)
    workers = {pid: p for pid, p in s["processes"].items() if pid != os.getpid()}
    assert len(workers) == 2
    assert all(p["opens"] == 1 for p in workers.values())
    sample_bytes = ref["x"][0].nbytes + ref["y"][0].nbytes
    assert sum(p["bytes"] for p in workers.values()) == 240 * sample_bytes
    assert sum(p["samples"] for p in workers.values()) == 240
    # a 40-sample batch in 20-sample blocks: at most 3 runs per key
    assert sum(p["reads"] for p in workers.values()) <= 6 * 3 * 2
    assert s["batches"] == 6 and s["compute_s"] >= 0.05
    text = format_summary(s)
    assert "6 batches" in text and sum(f"process {pid}: 1 opens" in text for pid in workers) == 2

    trace = write_loader_trace(trace_dir, tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text()) == trace
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    # the epoch plus the parent's one sample
    assert sum(e["args"]["bytes_read"] for e in xs if e["name"] == "io") == 241 * sample_bytes
    assert sum(1 for e in xs if e["name"] == "wait") == 6
    assert sum(1 for e in xs if e["name"] == "compute") == 6
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert sum(n.startswith("reader-") for n in names) == 2 and sum(n.startswith("loop-") for n in names) == 1


def test_empty_trace_dir_is_a_clear_error(tmp_path):
    with pytest.raises(InputFileError, match="holds no loader trace"):
        summary(tmp_path)
