"""Tasks a pool's workers take themselves (TaskClaims): each exactly once, in order, across processes."""

from __future__ import annotations

import multiprocessing as mp

from trajscale.block import FrameRange
from trajscale.executors.claims import TaskClaims, hand_out


def _take_all(claims: TaskClaims, out) -> None:
    for task, frames in claims:
        out.put((task, frames.start, frames.stop))
        claims.finished()


def test_processes_take_each_task_once_and_count_them_finished(tmp_path):
    """Three spawned processes taking 200 tasks at once: every task taken by one of them, none twice, each
    with its own frames; each process takes its tasks in increasing order; the finished count is 200."""
    ranges = [FrameRange(3 * i, 3 * i + 3) for i in range(200)]
    claims = TaskClaims.create(str(tmp_path), ranges)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_take_all, args=(claims, out)) for _ in range(3)]
    for p in procs:
        p.start()
    got = [out.get(timeout=120) for _ in range(200)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(t for t, _, _ in got) == list(range(200))
    assert all((a, b) == (3 * t, 3 * t + 3) for t, a, b in got)
    assert claims.n_finished == 200
    assert list(claims) == []   # none left
    claims.remove()
    assert claims.n_finished == 0 and not list(tmp_path.iterdir())


def test_a_stop_leaves_no_task_to_take(tmp_path):
    claims = TaskClaims.create(str(tmp_path), [FrameRange(i, i + 1) for i in range(10)])
    it = iter(claims)
    assert next(it)[0] == 0 and next(it)[0] == 1
    claims.stop()
    assert list(it) == [] and list(claims) == []


def test_only_a_source_that_reads_ahead_is_handed_out_as_claims(tmp_path):
    from trajscale.executors.base import Job

    ranges = [FrameRange(0, 5), FrameRange(5, 10)]
    job = Job(analysis={}, source={}, prepared=None)
    one_by_one = hand_out(job, ranges, 4, str(tmp_path))
    assert one_by_one.runs == [[(0, ranges[0])], [(1, ranges[1])]] and one_by_one.after is None
    taken = hand_out(Job(analysis={}, source={}, prepared=None, reads_ahead=True), ranges, 4, str(tmp_path))
    assert len(taken.runs) == 2 and all(run is taken.claims for run in taken.runs)   # (2 tasks: 2 workers)
    assert list(taken.claims) == [(0, ranges[0]), (1, ranges[1])]
