"""Tasks are sized from what the reader allocates and read in blocks of a bounded size."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis.rms import RMSD as MDA_RMSD

from trajscale import run
from trajscale.analysis import RMSD
from trajscale.block import FrameRange
from trajscale.errors import ConfigError
from trajscale.executors.base import blocks_of
from trajscale.sources import H5MDSource, MDASource

SELECT = "name CA or index 3340"   # CA atoms plus the frame's last atom


@pytest.fixture(scope="module")
def mda_rmsd(adk_vacuum):
    u = mda.Universe(*adk_vacuum)
    return MDA_RMSD(u, select=SELECT).run().results.rmsd[:, 2]


def test_blocks_cut_a_task_at_chunk_multiples():
    assert blocks_of(FrameRange(0, 20), 30, 7) == [FrameRange(0, 20)]   # fits: one block
    assert blocks_of(FrameRange(0, 100), 30, 7) == [FrameRange(0, 28), FrameRange(28, 56),
                                                    FrameRange(56, 84), FrameRange(84, 100)]
    assert blocks_of(FrameRange(5, 12), 3, 7) == [FrameRange(5, 8), FrameRange(8, 11), FrameRange(11, 12)]


def test_bytes_per_frame_is_what_the_reader_allocates(adk_vacuum, adk_vacuum_h5md):
    u = mda.Universe(*adk_vacuum)
    atoms = u.select_atoms(SELECT).indices
    with H5MDSource(adk_vacuum_h5md) as h5:   # CA + last atom span the frame: whole frames are read
        assert h5.bytes_per_frame(atoms) == (3341 + len(atoms)) * 12 + 40
        assert h5.bytes_per_frame(np.arange(100, 400)) == 300 * 12 + 40
    src = MDASource(*adk_vacuum)                # one decoded Timestep, then only the selection
    assert src.bytes_per_frame(atoms, ("position", "velocity")) == len(atoms) * 24 + 40


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_tasks_and_blocks_follow_the_block_budget(adk_vacuum, adk_vacuum_h5md, mda_rmsd, executor):
    """A 10-frame block budget: 10 tasks of whole frames (not 2 sized by the 215 selected atoms), exact."""
    frame = (3341 + 215) * 12 + 40
    r = run(RMSD(select=SELECT), adk_vacuum[0], adk_vacuum_h5md, executor=executor, n_workers=2,
            n_tasks=2, max_block_bytes=10 * frame)
    assert r.report.meta.n_tasks == 10
    assert max(t.bytes_read for t in r.report.tasks) <= 10 * 3341 * 12
    np.testing.assert_allclose(r.rmsd, mda_rmsd, atol=1e-4)


def test_one_task_is_read_in_blocks_and_reduced(adk_vacuum, adk_vacuum_h5md, mda_rmsd):
    """One 98-frame task with a 4-frame budget: the worker's read buffers hold 4 frames; MDAnalysis's RMSD."""
    from trajscale.engine import prepare
    from trajscale.executors import base
    from trajscale.executors.serial import SerialExecutor
    from trajscale.run import RunOptions

    analysis = RMSD(select=SELECT)
    frame = (3341 + 215) * 12 + 40
    job, _ = prepare(analysis, adk_vacuum[0], adk_vacuum_h5md, RunOptions(max_block_bytes=4 * frame))
    assert job.block_frames == 4
    base.close_cached_sources()
    try:
        got = SerialExecutor().map_tasks(job, [FrameRange(0, 98)])
        [partial], [timing] = got.partials, got.timings
        [src] = [s for cache in base._SOURCES.values() for s in cache.values()]
        assert max(buf.nbytes for buf in src._scratch.values()) <= 4 * 3341 * 12
    finally:
        base.close_cached_sources()
    assert timing.bytes_read == 98 * 3341 * 12   # whole frames moved, 4 at a time
    r = analysis.result(analysis.reduce([partial]), job.prepared)
    np.testing.assert_allclose(r.rmsd, mda_rmsd, atol=1e-4)
    np.testing.assert_array_equal(r.frames, np.arange(98))


def test_block_budget_must_be_positive(adk_vacuum, adk_vacuum_h5md):
    with pytest.raises(ConfigError, match="max_block_bytes"):
        run(RMSD(select=SELECT), adk_vacuum[0], adk_vacuum_h5md, max_block_bytes=0)


def test_a_partials_bytes_are_its_arrays_bytes():
    """What a fold counts of a partial (how soon it reduces a run of them): the bytes of every NumPy array in
    its dicts, sequences and dataclasses (the field names of each dataclass type looked up once), nothing for
    its labels and numbers, a class itself, an object of another kind, or a field marked held (an ensemble
    member's preparation: reducing keeps it whole)."""
    import dataclasses

    from trajscale.analysis.base import FrameRows, Prepared
    from trajscale.ensemble.analysis import MemberPartial
    from trajscale.executors.base import _nbytes

    @dataclasses.dataclass
    class Pair:
        a: object
        b: object = None

    frame, time, values = np.arange(3), np.ones(3), np.zeros((3, 4), np.float32)
    quads, atoms = np.zeros((4, 6), np.int64), np.arange(9)
    rows = FrameRows(frame, time, {"v": values})
    partial = [Pair(rows, {"labels": ("phi", "psi", 3, 1.5, None, b"x", True)}),
               (Prepared(atoms, {"quads": quads, "n": 4, "path": "a.xtc"}), Pair, object())]
    expect = frame.nbytes + time.nbytes + values.nbytes + atoms.nbytes + quads.nbytes
    assert _nbytes(partial) == expect
    assert _nbytes(partial) == expect   # (again, the field names now looked up)
    assert _nbytes(Pair) == 0 and _nbytes("text") == 0 and _nbytes(object()) == 0
    member = MemberPartial(rows, 3, prepared=Prepared(atoms, {"quads": quads}))
    assert _nbytes(member) == frame.nbytes + time.nbytes + values.nbytes
