"""Tasks across trajectories: they cover the round's axis in order, cut a long trajectory into tasks of its
own and group short ones whole, with about equal work each; rounds are cut by count and by bytes."""

from __future__ import annotations

import numpy as np

from trajscale.ensemble.plan import OPEN_S, Work, plan_round, rounds_of


def _works(lengths, per_frame=1e-3):
    out, offset = [], 0
    for n in lengths:
        out.append(Work(offset, n, per_frame))
        offset += n
    return out


def test_tasks_cover_the_axis_cut_long_and_group_short():
    works = _works([5] * 40 + [2000] + [5] * 40)
    tasks = plan_round(works, 8)
    edges = [t.start for t in tasks] + [tasks[-1].stop]
    assert edges[0] == 0 and edges[-1] == sum(w.n for w in works)
    assert all(a.stop == b.start for a, b in zip(tasks, tasks[1:], strict=False))   # contiguous
    long = works[40]
    inside = [t for t in tasks if long.offset <= t.start and t.stop <= long.offset + long.n]
    assert len(inside) >= 4   # the long one in tasks of its own
    starts = {w.offset for w in works} | {w.offset + w.n for w in works}
    for t in tasks:   # a short trajectory is never cut
        if not (long.offset <= t.start < long.offset + long.n):
            assert t.start in starts and t.stop in starts
    def work(t):
        return sum(max(0, min(t.stop, w.offset + w.n) - max(t.start, w.offset)) * w.per_frame
                   + (OPEN_S if w.offset < t.stop and t.start < w.offset + w.n else 0) for w in works)
    loads = np.array([work(t) for t in tasks])
    assert loads.max() < 2.5 * np.median(loads)


def test_a_thousand_tiny_trajectories_make_about_the_tasks_asked():
    tasks = plan_round(_works([2] * 1000, per_frame=1e-6), 8)
    assert 6 <= len(tasks) <= 10 and tasks[-1].stop == 2000


def test_rounds_by_count_and_by_bytes():
    assert rounds_of([1] * 10, 1, max_members=4) == [(0, 4), (4, 8), (8, 10)]
    big = 3 * 1024**3
    assert rounds_of([big, big, 1, 1], 1, max_members=100) == [(0, 1), (1, 4)]
