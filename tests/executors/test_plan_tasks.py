"""Task planning: chunk-aligned, bounded in size, and balanced over workers."""

from __future__ import annotations

import itertools
import math

import pytest

from trajscale.planning import plan_tasks


@pytest.mark.parametrize("n_workers", [1, 2, 3, 16])
def test_tasks_cover_the_range_aligned_and_balanced_over_workers(n_workers):
    frame_bytes = 47_681 * 12                       # whole frames of the AdK-in-water system
    budget = 256 * 1024**2   # a budget of its own (the default's planning is the same arithmetic)
    ranges = plan_tasks(0, 5000, 4 * n_workers if n_workers > 1 else 1, 3, frame_bytes, n_workers, budget)
    assert ranges[0].start == 0 and ranges[-1].stop == 5000
    assert all(a.stop == b.start for a, b in itertools.pairwise(ranges))
    assert all(r.start % 3 == 0 for r in ranges)
    assert max((r.stop - r.start) * frame_bytes for r in ranges) <= budget
    k = len(ranges)
    assert k % n_workers == 0
    # The MPI executor gives rank r tasks [ceil(r k / N), ceil((r + 1) k / N)).
    per_rank = [sum(r.stop - r.start for r in ranges[math.ceil(i * k / n_workers):math.ceil((i + 1) * k / n_workers)])
                for i in range(n_workers)]
    assert max(per_rank) - min(per_rank) <= 3 * k // n_workers
