"""Every cache of open sources in a process shares one budget: an ensemble of segmented members holds at most
the budget open (the process's /proc/self/fd, counted by the analysis itself at every frame), not members
times parts."""

from __future__ import annotations

import gc
import os
import struct
import threading

import numpy as np
import pytest

import trajscale as ts
from trajscale.analysis.user import per_frame
from trajscale.sources import open_source, opened

from .test_many import numpy_rgyr

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")

PDB = ("ATOM      1  C   ALA A   1       0.000   0.000   0.000  1.00  0.00           C\n"
       "ATOM      2  O   ALA A   1       1.000   0.000   0.000  1.00  0.00           O\n"
       "ATOM      3  N   ALA A   1       0.000   1.000   0.000  1.00  0.00           N\nEND\n")


def segmented_ensemble(folder, members: int, parts: int) -> np.ndarray:
    """``members`` members of ``parts`` one-frame XTC files of 3 atoms each, a topology and a catalog listing
    each member's parts in one cell; the positions written, in Å, ``(members, parts, 3, 3)``."""
    (folder / "top.pdb").write_text(PDB)
    pos_nm = (np.random.default_rng(5).random((members, parts, 3, 3)) * 2.0).astype(np.float32)
    box = np.diag([3.0, 3.0, 3.0]).astype(">f4").tobytes()
    lines = ["name,topology,trajectory"]
    for m in range(members):
        names = [f"m{m:03d}_{p:02d}.xtc" for p in range(parts)]
        for p, name in enumerate(names):   # (each part numbers its frame on from the last: one chain)
            (folder / name).write_bytes(struct.pack(">iiif", 1995, 3, p, float(p)) + box + struct.pack(">i", 3)
                                        + pos_nm[m, p].astype(">f4").tobytes())
        lines.append(f"m{m:03d},top.pdb,{' '.join(names)}")
    (folder / "catalog.csv").write_text("\n".join(lines) + "\n")
    return pos_nm * np.float32(10.0)


def read_one(path):
    """An XTC file's source, its frame read (its file open)."""
    src = open_source(str(path))
    src.read(0, 1)
    return src


@per_frame
def open_files(positions, box):
    """This process's open file descriptors, once per frame."""
    return np.full(len(positions), len(os.listdir("/proc/self/fd")), np.float64)


@pytest.mark.parametrize("executor", ["serial", "threads"])
def test_segmented_members_hold_at_most_the_budget(tmp_path, monkeypatch, executor):
    """40 members of 8 parts, each member's parts kept open (64 a member by default) and 16 members kept: 128
    files a thread without one budget; with a budget of 12, at most 12 in the process, its threads together
    (and every member's result as NumPy's)."""
    monkeypatch.setattr(opened, "BUDGET", 12)
    pos = segmented_ensemble(tmp_path, 40, 8)
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    rgyr, fds = ts.run([ts.RadiusOfGyration(select="all"), ts.PerFrame(open_files)], str(tmp_path / "catalog.csv"),
                    executor=executor, n_workers=2)
    assert len(rgyr) == 40 and not rgyr.refused
    np.testing.assert_allclose(rgyr.columns()["rgyr"].reshape(40, 8), numpy_rgyr(pos), rtol=2e-6)
    counts = fds.columns()["values"]
    assert counts.max() - before <= 12 + 1, (before, counts.max())   # (+1: the topology, read while preparing)
    assert counts.max() - before >= 8   # (a member's parts were held: the budget was what bounded them)
    assert opened.open_now() == 0   # (the run closed what it opened)


def test_sources_left_open_by_an_ended_thread_do_not_crowd_out_a_run(tmp_path, monkeypatch):
    """Sources a finished thread left open fill the budget: the run's thread closes them (nobody can use them
    any more) and still holds its member's parts, rather than opening and closing a part per read."""
    monkeypatch.setattr(opened, "BUDGET", 12)
    pos = segmented_ensemble(tmp_path, 40, 8)
    gc.collect()
    start, held = len(os.listdir("/proc/self/fd")), opened.open_now()
    left = opened.OpenSources(64)
    worker = threading.Thread(target=lambda: [left.add(p, read_one(tmp_path / f"m039_{p:02d}.xtc")) for p in range(8)])
    worker.start()
    worker.join()
    assert len(os.listdir("/proc/self/fd")) - start == 8 and opened.open_now() - held == 8   # (its files are open)
    monkeypatch.setattr(opened, "BUDGET", held + 8)   # (all taken, the ended thread's last)
    rgyr, fds = ts.run([ts.RadiusOfGyration(select="all"), ts.PerFrame(open_files)], str(tmp_path / "catalog.csv"),
                    executor="serial")
    np.testing.assert_allclose(rgyr.columns()["rgyr"].reshape(40, 8), numpy_rgyr(pos), rtol=2e-6)
    assert len(left) == 0   # (closed to make room)
    assert fds.columns()["values"].max() - start >= 6   # (a member's parts were held)


def test_a_cache_nobody_holds_closes_its_sources(tmp_path):
    """A cache dropped without being closed (a dataset let go of) closes its files and leaves the budget when
    it is collected, not at the end of the process."""
    segmented_ensemble(tmp_path, 1, 4)
    gc.collect()
    start, held = len(os.listdir("/proc/self/fd")), opened.open_now()
    cache = opened.OpenSources(64)
    for p in range(4):
        cache.add(p, read_one(tmp_path / f"m000_{p:02d}.xtc"))
    assert len(os.listdir("/proc/self/fd")) - start == 4 and opened.open_now() - held == 4
    del cache
    gc.collect()
    assert opened.open_now() == held and len(os.listdir("/proc/self/fd")) == start


def _open_parts(folder) -> int:
    """Files under ``folder`` this process has open now."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:   # (the listing's own, closed by now)
            pass
    return sum(1 for link in links if link.startswith(str(folder)))


def test_an_executor_kept_over_many_runs_holds_at_most_the_budget(tmp_path, monkeypatch):
    """The executors' cache of each run's Source takes its share of the one budget: one executor kept over 30
    runs, each over a trajectory of its own (an XTC file), holds at most the budget open in its process (each run's
    file stayed open before), and every run's result is its file's."""
    from trajscale.executors.serial import SerialExecutor

    monkeypatch.setattr(opened, "BUDGET", 12)
    pos = segmented_ensemble(tmp_path, 30, 1)
    ex, most = SerialExecutor(), 0
    try:
        for m in range(30):
            r = ts.run(ts.RadiusOfGyration(select="all"), str(tmp_path / "top.pdb"), str(tmp_path / f"m{m:03d}_00.xtc"),
                       executor=ex)
            np.testing.assert_allclose(r.rgyr, numpy_rgyr(pos[m]), rtol=2e-6)
            most = max(most, _open_parts(tmp_path))
        assert 12 - 1 <= most <= 12   # (the budget bounded them: the kept runs' files fill it, and no more)
    finally:
        ex.close()
    assert _open_parts(tmp_path) == 0 and opened.open_now() == 0
