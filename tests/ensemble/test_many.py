"""Thousands of tiny trajectories in one job: each one's result as NumPy computes it from the coordinates
written, and no worker ever holds more than a few of them open (its /proc/self/fd, counted by the analysis
itself at every frame)."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import trajscale as ts
from tests.support.ensembles import tiny_ensemble as tiny
from trajscale.analysis.user import per_frame

#: Masses MDAnalysis guesses for the three atoms (C, O, N).
MASSES = np.array([12.011, 15.999, 14.007])


def tiny_ensemble(folder, n: int) -> np.ndarray:
    """``n`` XTC files of 3 atoms x 2 frames, a topology and a catalog (a label ``k``) in ``folder``; the
    positions written (Å, float32), ``(n, 2, 3, 3)``."""
    return tiny(folder, n, seed=7, numbered=True)[1]


def numpy_rgyr(pos: np.ndarray) -> np.ndarray:
    """Mass-weighted radius of gyration of each frame of ``(..., 3, 3)`` positions, in float64."""
    p = pos.astype(np.float64)
    com = (p * MASSES[:, None]).sum(-2, keepdims=True) / MASSES.sum()
    return np.sqrt((MASSES * ((p - com) ** 2).sum(-1)).sum(-1) / MASSES.sum())


@per_frame
def open_files(positions, box):
    """This process's open file descriptors, once per frame."""
    return np.full(len(positions), len(os.listdir("/proc/self/fd")), np.float64)


@per_frame
def kept_rounds(positions, box):
    """The sources this thread's tasks keep for the next (an ensemble's: its latest round's), once per frame."""
    from trajscale.executors import base

    cache = base._thread_sources()
    return np.full(len(positions), len(cache) + (cache.round is not None), np.float64)


def run_and_check(folder, n: int, executor: str, max_open: int = 4) -> None:
    pos = tiny_ensemble(folder, n)
    gc.collect()   # an earlier test's garbage holding files, collected mid-run, would change the count
    rgyr, fds, kept = ts.run([ts.RadiusOfGyration(select="all"), ts.PerFrame(open_files), ts.PerFrame(kept_rounds)],
                             str(folder / "catalog.csv"), executor=executor, n_workers=2, max_open=max_open)
    assert kept.columns()["values"].max() == 1   # (a round's source, not every round's: 8 rounds and more)
    assert len(rgyr) == n and not rgyr.refused
    table = rgyr.columns()
    assert len(table["rgyr"]) == 2 * n
    np.testing.assert_allclose(table["rgyr"].reshape(n, 2), numpy_rgyr(pos), rtol=2e-6)
    assert table["trajectory"][::2].tolist() == [f"t{i:05d}" for i in range(n)]
    counts = fds.columns()["values"]
    # a worker's descriptors vary by the few trajectories it holds, never by the thousands it read
    assert counts.max() - counts.min() <= max_open + 2, (counts.min(), counts.max())
    facts = rgyr.trajectories
    assert facts.n_finished == n and facts.costs.opens >= n


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_a_thousand_tiny_trajectories(tmp_path, executor):
    """A thousand members on two workers holding at most four open: the bound holds at any count (the
    134,950-member job is benchmarks/scale.py's), and MDAnalysis reads the files written alike."""
    import MDAnalysis as mda

    run_and_check(tmp_path, 1000, executor)
    u = mda.Universe(str(tmp_path / "top.pdb"), str(tmp_path / "t00999.xtc"))
    assert np.allclose(u.atoms.masses, MASSES)
    ref = [u.atoms.radius_of_gyration() for _ in u.trajectory]
    r = ts.run(ts.RadiusOfGyration(select="all"), str(tmp_path / "top.pdb"), str(tmp_path / "t00999.xtc"))
    np.testing.assert_allclose(r.rgyr, ref, rtol=1e-6)


def _kept_bytes(make) -> int:
    """Bytes (tracemalloc's count) that ``make()`` leaves held once it has returned (what it keeps itself)."""
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        make()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_the_roots_bookkeeping_does_not_grow_with_the_trajectories():
    """What the root keeps of a run's trajectories: the costs of 10,000 folded (the summary's totals exact, as
    NumPy sums them; the slowest five and the histogram as NumPy finds them) in the bytes 1,000 take; the
    catalog as columns, under 200 bytes a member (a Member record alone takes more); a result's members a
    view of the catalog less its refused."""
    from trajscale.ensemble.catalog import Ensemble, Member
    from trajscale.ensemble.results import FinishedMembers
    from trajscale.ensemble.summary import EnsembleFacts, MemberCosts, MemberStats, histogram_edges

    rng = np.random.default_rng(1)

    def handed(items: list):
        """``items`` one at a time, each let go of as it is handed on (as the rounds hand the root's work)."""
        items.reverse()
        while items:
            yield items.pop()

    sizes = {}
    for n in (1_000, 10_000):
        t, atoms, frames = rng.exponential(0.01, (n, 3)), rng.integers(3, 5000, n), rng.integers(1, 500, n)
        stats = [MemberStats(f"t{i:05d}", int(frames[i]), 12 * int(frames[i]), *t[i].tolist(), 0.0, 1,
                             int(atoms[i])) for i in range(n)]
        costs = MemberCosts()
        sizes[n] = _kept_bytes(lambda costs=costs, stats=stats: [costs.add(s) for s in handed(stats)])
        seconds = t.sum(axis=1)
        assert costs.n == n and costs.frames == frames.sum() and costs.bytes == 12 * frames.sum()
        assert (costs.atoms_min, costs.atoms_max) == (atoms.min(), atoms.max())
        np.testing.assert_allclose(costs.seconds, seconds.sum(), rtol=1e-12)
        assert [s.name for s in costs.slowest()] == [f"t{i:05d}" for i in np.argsort(-seconds, kind="stable")[:5]]
        counts, _ = np.histogram(seconds, [0.0, *histogram_edges(), np.inf])
        assert costs.histogram == counts.tolist()
        facts = EnsembleFacts(n_trajectories=n, n_finished=n, costs=costs)
        assert len(str(facts.to_dict())) < 4000 and facts.atoms == f"{costs.atoms_min}-{costs.atoms_max}"
    assert sizes[10_000] <= sizes[1_000] + 1024, sizes

    n = 5_000
    members = [Member(f"m{i:05d}", (f"/data/run{i:05d}/md.xtc",), "/data/top.psf", {"replica": i % 5})
               for i in range(n)]
    ens = []
    per_member = _kept_bytes(lambda: ens.append(Ensemble(handed(members)))) / n
    assert per_member < 200, per_member
    ens = ens[0]
    assert ens["m00007"] == Member("m00007", ("/data/run00007/md.xtc",), "/data/top.psf", {"replica": 2})
    gone = {3, 4, n - 1}
    view = FinishedMembers(ens, gone)
    assert len(view) == n - 3 and [m.name for m in view][:4] == ["m00000", "m00001", "m00002", "m00005"]
    assert view[3].name == "m00005" and view[-1].name == f"m{n - 2:05d}"
    assert view.has("m00010") and not view.has("m00004") and not view.has("nothing")
