"""Chains of parts of unequal lengths: tasks follow part boundaries, and a long-lived worker checks only
the parts it reads (issue 14, "Task boundaries follow segment boundaries"; the worker source cache).

References are MDAnalysis's own readers on the unsplit trajectory (or on the rewritten parts).
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysis.lib.formats.libmdaxdr import XTCFile
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.block import FrameRange
from trajscale.convert.split import split
from trajscale.engine import prepare
from trajscale.executors.base import close_cached_sources, run_task
from trajscale.executors.processes import ProcessExecutor
from trajscale.planning import plan_strided_tasks, plan_tasks
from trajscale.run import RunOptions

#: Unequal parts, as restarts leave them: short ones between long ones.
LENGTHS = [7, 2, 11, 5, 15]


def _write_xtc(path: Path, frames, indices) -> None:
    with XTCFile(str(path), "w") as w:
        for i in indices:
            x, box = frames[i % len(frames)]
            w.write(x, box, i, 10.0 * i, 1000.0)


@pytest.fixture(scope="module")
def water_frames():
    with XTCFile(D.XTC) as f:
        return [(fr.x.copy(), fr.box.copy()) for fr in f]


@pytest.fixture(scope="module")
def unequal_chain(tmp_path_factory, water_frames):
    """AdK in water in parts of LENGTHS frames (frame i = the XTC's frame i % 10), and the same frames unsplit."""
    d = tmp_path_factory.mktemp("unequal")
    parts, start = [], 0
    for k, n in enumerate(LENGTHS):
        p = d / f"traj.part{k + 1:04d}.xtc"
        _write_xtc(p, water_frames, range(start, start + n))
        parts.append(str(p))
        start += n
    whole = d.parent / f"{d.name}-whole.xtc"
    _write_xtc(whole, water_frames, range(start))
    return parts, str(whole)


def _part_of(frame: int) -> int:
    return int(np.searchsorted(np.cumsum(LENGTHS), frame, side="right"))


def _assert_tasks_follow_parts(tasks, step: int = 1) -> None:
    for t in tasks:
        kept = range(t.start, t.stop, step)
        assert _part_of(kept[0]) == _part_of(kept[-1]), f"task [{t.start}, {t.stop}) straddles a part boundary"


@pytest.mark.parametrize("n_tasks", [3, 8, 16])
def test_tasks_follow_unequal_parts_and_equal_mdanalysis(unequal_chain, n_tasks):
    parts, whole = unequal_chain
    ref = rms.RMSD(mda.Universe(D.GRO, whole), select="name CA").run().results.rmsd[:, 2]
    r = ts.run(ts.RMSD(select="name CA"), D.GRO, parts, n_tasks=n_tasks)
    np.testing.assert_allclose(r.rmsd, ref, atol=1e-4)
    tasks = sorted(r.report.tasks, key=lambda t: t.start)
    assert tasks[0].start == 0 and tasks[-1].stop == sum(LENGTHS)
    assert all(a.stop == b.start for a, b in itertools.pairwise(tasks))
    if n_tasks >= 8:   # each part is a task's share or more (40 / 8), or stands alone between longer ones
        _assert_tasks_follow_parts(tasks)
        # and a long part is cut into several tasks inside it
        assert sum(1 for t in tasks if _part_of(t.start) == LENGTHS.index(15)) > 1
    else:   # short parts may share a task, but only whole ones
        bounds = set(np.cumsum([0] + LENGTHS).tolist())
        for t in tasks:
            assert _part_of(t.start) == _part_of(t.stop - 1) or {t.start, t.stop} <= bounds, (t.start, t.stop)


def test_processes_and_a_stride_keep_tasks_in_their_parts(unequal_chain):
    parts, whole = unequal_chain
    u = mda.Universe(D.GRO, whole)
    ref = rms.RMSD(u, select="name CA").run(step=3).results.rmsd[:, 2]
    r = ts.run(ts.RMSD(select="name CA"), D.GRO, parts, executor="processes", n_workers=2, n_tasks=12, step=3)
    np.testing.assert_allclose(r.rmsd, ref, atol=1e-4)
    _assert_tasks_follow_parts(r.report.tasks, step=3)


def test_plan_with_part_starts_cuts_only_inside_long_parts():
    """Planner alone: part starts are task starts; 1,000 short parts make about n_tasks tasks, not 1,000."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 40, 60).tolist() + [900] + rng.integers(1, 5, 1000).tolist()
    starts = np.cumsum([0] + lengths)
    part_starts = tuple(int(s) for s in starts[1:-1])
    n = int(starts[-1])
    ranges = plan_tasks(0, n, 16, 1, 100, part_starts=part_starts)
    cuts = [r.start for r in ranges]
    assert cuts[0] == 0 and ranges[-1].stop == n
    assert all(a.stop == b.start for a, b in itertools.pairwise(ranges))
    part = np.searchsorted(starts, np.arange(n), side="right") - 1
    for r in ranges:   # a task is a piece of one part, or whole parts
        first, last = part[r.start], part[r.stop - 1]
        assert first == last or (starts[first] == r.start and starts[last + 1] == r.stop)
    assert len(ranges) <= 3 * 16
    long_part = lengths.index(900)
    assert sum(1 for r in ranges if part[r.start] == long_part) > 1   # the long part is cut inside
    strided = plan_strided_tasks(0, n, 7, 16, 100, part_starts=part_starts)
    for r in strided:
        kept = range(r.start, r.stop, 7)
        first, last = part[kept[0]], part[kept[-1]]
        assert first == last or starts[first] <= r.start and r.stop <= starts[last + 1]


# ------------------------------------------------------------------ the worker's source cache


def test_a_reused_worker_reads_a_part_rewritten_in_place(tmp_path, adk_vacuum_h5md):
    """A part replaced between two runs on one pool: the workers reopen it and give the new data's RMSDs."""
    folder = tmp_path / "parts"
    split(adk_vacuum_h5md, folder, 4)
    part_paths = sorted(str(p) for p in folder.glob("part_*.h5md"))
    with ProcessExecutor(n_workers=2) as ex:
        first = ts.run(ts.RMSD(select="name CA"), D.PSF, str(folder), executor=ex, n_tasks=4).rmsd
        new = tmp_path / "new.h5md"   # part 1 with its frames reversed, renamed over it (convert --overwrite does so)
        shutil.copy(part_paths[1], new)
        with h5py.File(new, "r+") as f:
            pos = f["particles/all/position/value"]
            pos[...] = pos[:][::-1]
        os.replace(new, part_paths[1])
        second = ts.run(ts.RMSD(select="name CA"), D.PSF, str(folder), executor=ex, n_tasks=4).rmsd
    ref = rms.RMSD(mda.Universe(D.PSF, part_paths), select="name CA").run().results.rmsd[:, 2]
    assert not np.allclose(first, ref, atol=1e-3), "the rewrite must change the RMSDs"
    np.testing.assert_allclose(second, ref, atol=1e-4)


def _part_stats_in_a_task(folder: Path, n_parts: int, water_frames, monkeypatch) -> list[str]:
    """os.stat calls on the chain's files while a worker's cached source runs one more task."""
    folder.mkdir()
    parts = []
    for k in range(n_parts):
        parts.append(str(folder / f"p{k:03d}.xtc"))
        _write_xtc(Path(parts[-1]), water_frames, range(2 * k, 2 * k + 2))
    job, _ = prepare(ts.RMSD(select="name CA"), D.GRO, parts, RunOptions())
    close_cached_sources()
    try:
        run_task(job, 0, FrameRange(0, 2), "w")      # the worker opens and caches the source, and part 0
        run_task(job, 1, FrameRange(2, 4), "w")
        calls: list[str] = []
        real = os.stat

        def counting(path, *args, **kwargs):
            calls.append(os.fspath(path) if not isinstance(path, int) else str(path))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, "stat", counting)
        run_task(job, 2, FrameRange(0, 2), "w")      # another task on part 0, already open
        monkeypatch.undo()
    finally:
        close_cached_sources()
    return [c for c in calls if c.startswith(str(folder))]


def test_stats_per_task_do_not_grow_with_the_parts(tmp_path, water_frames, monkeypatch):
    few = _part_stats_in_a_task(tmp_path / "five", 5, water_frames, monkeypatch)
    many = _part_stats_in_a_task(tmp_path / "fifty", 50, water_frames, monkeypatch)
    assert len(many) == len(few) <= 2, (few, many)
    assert all(Path(c).name == "p000.xtc" for c in many), "only the part the task reads is checked"
