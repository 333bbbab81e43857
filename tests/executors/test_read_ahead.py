"""Read-ahead: a thread reads the next block (GIL released) while this one is mapped."""

from __future__ import annotations

import threading

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

import trajscale as ts
from trajscale.block import FrameRange
from trajscale.errors import TaskError
from trajscale.executors import base as executors_base
from trajscale.sources import H5MDSource

pytest.importorskip("numba")

CA = "name CA"


def test_the_block_being_mapped_is_never_the_one_being_read(adk_vacuum_h5md):
    """Two buffer slots in turn: block k+1 lands beside block k, never on it, and every block is exact."""
    with h5py.File(adk_vacuum_h5md, "r") as f:
        reference = f["particles/all/position/value"][()]
    atoms = np.arange(100, 1300, 3)
    ranges = [FrameRange(a, min(98, a + 17)) for a in range(0, 98, 17)]
    with H5MDSource(adk_vacuum_h5md) as src:
        src.reuse_buffers = True   # as in the task wrapper
        assert src.reads_without_gil(("position",))
        seen = []
        for k, (block, waited) in enumerate(executors_base._read_blocks(src, ranges, atoms, ("position",), 1, True)):
            r = ranges[k]
            # checked before the next block is asked for: the thread may be filling the other slot now
            np.testing.assert_array_equal(block.positions, reference[r.start:r.stop][:, atoms])
            assert waited >= 0
            if seen:
                assert not np.shares_memory(block.positions, seen[-1])
            seen.append(block.positions)
        assert np.shares_memory(seen[0], seen[2])   # two slots, reused: memory stays bounded


def test_a_run_reads_in_the_helper_thread_and_equals_mdanalysis(adk_vacuum, adk_vacuum_h5md, monkeypatch):
    monkeypatch.setattr(executors_base.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    threads = []
    orig = H5MDSource.read

    def recording(self, *a, **kw):
        threads.append(threading.current_thread().name)
        return orig(self, *a, **kw)

    monkeypatch.setattr(H5MDSource, "read", recording)
    r = ts.run(ts.RMSD(select=CA), adk_vacuum[0], adk_vacuum_h5md, executor="serial")
    ref = rms.RMSD(mda.Universe(*adk_vacuum), select=CA).run().results.rmsd[:, 2]
    np.testing.assert_allclose(r.rmsd, ref, atol=1e-5)
    assert sum(name.startswith("trajscale-read") for name in threads) >= executors_base.READ_AHEAD_BLOCKS
    assert r.report.tasks[0].t_io >= 0


def test_an_error_in_the_read_ahead_thread_reaches_the_run(adk_vacuum, adk_vacuum_h5md, monkeypatch):
    """A read failing in the helper thread fails the task with that error (no hang, no lost error)."""
    monkeypatch.setattr(executors_base.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    orig = H5MDSource.read

    def failing(self, start, stop, *a, **kw):
        if start > 0 and threading.current_thread().name.startswith("trajscale-read"):
            raise OSError(f"disk gone at frame {start}")
        return orig(self, start, stop, *a, **kw)

    monkeypatch.setattr(H5MDSource, "read", failing)
    with pytest.raises(TaskError, match="disk gone"):
        ts.run(ts.RMSD(select=CA), adk_vacuum[0], adk_vacuum_h5md, executor="serial")


def test_workers_that_fill_the_cores_do_not_read_ahead(monkeypatch):
    """A reader thread per worker needs a spare core each: 1 worker on 2 cores reads ahead, 2 do not."""
    monkeypatch.setattr(executors_base.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert executors_base.may_read_ahead(1)
    assert not executors_base.may_read_ahead(2)
    monkeypatch.setattr(executors_base.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert executors_base.may_read_ahead(8) and not executors_base.may_read_ahead(9)


def test_a_serial_run_on_a_busy_machine_reads_in_its_own_thread(adk_vacuum, adk_vacuum_h5md, monkeypatch):
    monkeypatch.setattr(executors_base.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    threads = []
    orig = H5MDSource.read
    monkeypatch.setattr(H5MDSource, "read", lambda self, *a, **kw: (threads.append(threading.current_thread().name),
                                                                     orig(self, *a, **kw))[1])
    ts.run(ts.RMSD(select=CA), adk_vacuum[0], adk_vacuum_h5md, executor="serial")
    assert threads and not any(name.startswith("trajscale-read") for name in threads)
