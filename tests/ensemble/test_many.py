"""Thousands of tiny trajectories in one job: each one's result as NumPy computes it from the coordinates
written, and no worker ever holds more than a few of them open (its /proc/self/fd, counted by the analysis
itself at every frame)."""

from __future__ import annotations

import gc
import os
import struct

import numpy as np
import pytest

import trajscale as ts
from trajscale.analysis.user import per_frame

#: Masses MDAnalysis guesses for the three atoms (C, O, N).
MASSES = np.array([12.011, 15.999, 14.007])
PDB = ("ATOM      1  C   ALA A   1       0.000   0.000   0.000  1.00  0.00           C\n"
       "ATOM      2  O   ALA A   1       1.000   0.000   0.000  1.00  0.00           O\n"
       "ATOM      3  N   ALA A   1       0.000   1.000   0.000  1.00  0.00           N\nEND\n")


def tiny_ensemble(folder, n: int) -> np.ndarray:
    """``n`` XTC files of 3 atoms x 2 frames (XTC stores 9 or fewer atoms uncompressed), a topology and a
    catalog in ``folder``; the positions written (Å, float32), ``(n, 2, 3, 3)``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "top.pdb").write_text(PDB)
    pos_nm = (np.random.default_rng(7).random((n, 2, 3, 3)) * 2.0).astype(np.float32)
    box = np.diag([3.0, 3.0, 3.0]).astype(">f4").tobytes()
    lines = ["name,topology,trajectory,k"]
    for i in range(n):
        frames = b"".join(struct.pack(">iiif", 1995, 3, f, float(f)) + box + struct.pack(">i", 3)
                          + pos_nm[i, f].astype(">f4").tobytes() for f in range(2))
        (folder / f"t{i:05d}.xtc").write_bytes(frames)
        lines.append(f"t{i:05d},top.pdb,t{i:05d}.xtc,{i}")
    (folder / "catalog.csv").write_text("\n".join(lines) + "\n")
    return pos_nm * np.float32(10.0)


def numpy_rgyr(pos: np.ndarray) -> np.ndarray:
    """Mass-weighted radius of gyration of each frame of ``(..., 3, 3)`` positions, in float64."""
    p = pos.astype(np.float64)
    com = (p * MASSES[:, None]).sum(-2, keepdims=True) / MASSES.sum()
    return np.sqrt((MASSES * ((p - com) ** 2).sum(-1)).sum(-1) / MASSES.sum())


@per_frame
def open_files(positions, box):
    """This process's open file descriptors, once per frame."""
    return np.full(len(positions), len(os.listdir("/proc/self/fd")), np.float64)


def run_and_check(folder, n: int, executor: str, max_open: int = 4) -> None:
    pos = tiny_ensemble(folder, n)
    gc.collect()   # an earlier test's garbage holding files, collected mid-run, would change the count
    rgyr, fds = ts.run([ts.RadiusOfGyration(select="all"), ts.PerFrame(open_files)], str(folder / "catalog.csv"),
                       executor=executor, n_workers=2, max_open=max_open)
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
    run_and_check(tmp_path, 1000, executor)


@pytest.mark.slow(seconds=30)
def test_ten_thousand_tiny_trajectories_in_one_job(tmp_path):
    import MDAnalysis as mda

    run_and_check(tmp_path, 10_000, "processes")
    u = mda.Universe(str(tmp_path / "top.pdb"), str(tmp_path / "t09999.xtc"))   # MDAnalysis reads them alike
    assert np.allclose(u.atoms.masses, MASSES)
    ref = [u.atoms.radius_of_gyration() for _ in u.trajectory]
    r = ts.run(ts.RadiusOfGyration(select="all"), str(tmp_path / "top.pdb"), str(tmp_path / "t09999.xtc"))
    np.testing.assert_allclose(r.rgyr, ref, rtol=1e-6)
