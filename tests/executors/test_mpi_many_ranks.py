"""Many MPI ranks on one small machine (oversubscribed): results equal MDAnalysis's, no rank hangs,
each rank opens only the files of its tasks, the topology is parsed once, memory stays bounded.

Starting a rank costs more here than its share of the work, so each kind of job starts its ranks once:
the three RMSD runs share one launch of 16 ranks, and the parallel writer's three strategies one launch
of 8 (its collective writes keep every oversubscribed rank polling). Every launch has a timeout: a rank
stuck in a collective fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import run_cli, run_mpi

pytest.importorskip("mpi4py")
pytestmark = [pytest.mark.mpi, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SCRIPT = str(HERE / "mpi_many_script.py")
N = 16
#: Ranks of the writing jobs (convert, ParallelWriter): still four to a core here.
N_WRITE = 8
#: Generous bound on one rank's peak RSS: the interpreter, NumPy, h5py, and on rank 0 MDAnalysis with the
#: AdK topology (about 280 MB measured); a rank holding the whole trajectory or many open parts would not matter
#: here, but a leak per task or per part would show against 98 frames x 3341 atoms (4 MB).
RSS_BOUND = 600 * 2**20
TIMEOUT = 400   # one launch holds several runs, and the machine may be loaded


@pytest.fixture(scope="module")
def mda_rmsd():
    """MDAnalysis's own CA RMSD of the PSF/DCD trajectory (the reference)."""
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms

    u = mda.Universe(D.PSF, D.DCD)
    return rms.RMSD(u, select="name CA").run().results.rmsd[:, 2]


@pytest.fixture(scope="module")
def segments(tmp_path_factory, adk_vacuum_h5md):
    """The trajectory split into 16 parts with ``trajscale split``."""
    folder = tmp_path_factory.mktemp("seg") / "parts"
    proc = run_cli("split", adk_vacuum_h5md, "-o", str(folder), "--parts", str(N))
    assert proc.returncode == 0, proc.stderr
    index = json.loads((folder / "index.json").read_text())
    starts = np.cumsum([0] + [s["n_frames"] for s in index["segments"]])
    paths = [os.path.realpath(folder / s["path"]) for s in index["segments"]]
    return folder / "index.json", paths, starts


@pytest.fixture(scope="module")
def runs(tmp_path_factory, adk_vacuum_h5md, segments) -> dict:
    """One launch of N ranks: CA RMSD over the one file, over the N parts in N tasks, and over the parts in
    the default tasks."""
    tmp = tmp_path_factory.mktemp("many")
    out = tmp / "out.json"
    index = segments[0]
    # an empty topology and selection cache: rank 0 parses the topology (a cached one imports no MDAnalysis at all)
    proc = run_mpi(N, [SCRIPT, D.PSF, str(out), adk_vacuum_h5md, f"{index}:{N}", str(index)], timeout=TIMEOUT,
                   env={"TRAJSCALE_CACHE_DIR": str(tmp / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    one_file, parts_n, parts_default = json.loads(out.read_text())
    return {"one file": one_file, N: parts_n, None: parts_default}


def _common_checks(got: dict, mda_rmsd) -> None:
    np.testing.assert_allclose(got["rmsd"], mda_rmsd, atol=1e-4)
    assert len(got["workers"]) == N
    # the topology is read on rank 0 only, and its result broadcast: no other rank imported MDAnalysis
    assert got["mdanalysis"][0] and not any(got["mdanalysis"][1:])
    assert [w["worker"] for w in got["workers"] if w["t_init_top"] > 0] in (["rank 0"], [])
    assert max(got["peak_rss"]) < RSS_BOUND, [r // 2**20 for r in got["peak_rss"]]


def test_16_ranks_over_one_file(runs, adk_vacuum_h5md, mda_rmsd):
    got = runs["one file"]
    _common_checks(got, mda_rmsd)
    # the launch's first run: the topology is parsed there, once, on rank 0
    assert [w["worker"] for w in got["workers"] if w["t_init_top"] > 0] == ["rank 0"]
    for w in got["workers"]:   # each rank opened the one file, once
        assert [os.path.realpath(p) for p in w["files_opened"]] == [os.path.realpath(adk_vacuum_h5md)], w


@pytest.mark.parametrize("n_tasks", [N, None])
def test_16_ranks_over_16_parts_open_only_their_parts(runs, segments, mda_rmsd, n_tasks):
    index, paths, starts = segments
    got = runs[n_tasks]
    _common_checks(got, mda_rmsd)
    opened_by = {}
    for w in got["workers"]:
        mine = [t for t in got["tasks"] if t["worker"] == w["worker"]]
        # the parts holding this rank's frames, from the index's frame counts
        needed = {paths[k] for t in mine for k in range(len(paths))
                  if starts[k] < t["stop"] and starts[k + 1] > t["start"]}
        opened = [os.path.realpath(p) for p in w["files_opened"]]
        assert set(opened) == needed and len(opened) == len(set(opened)) <= 2, (w["worker"], opened, needed)
        for p in opened:
            opened_by.setdefault(p, []).append(w["worker"])
    assert sorted(opened_by) == sorted(paths)   # every part read, by the rank(s) whose frames it holds


def test_8_ranks_convert_equals_serial(tmp_path):
    import h5py

    from trajscale.convert.convert import convert
    from trajscale.h5md.layout import Layout

    serial = tmp_path / "serial.h5md"
    convert(D.PSF, [D.DCD], str(serial), layout=Layout.parse("3"))
    out = tmp_path / "mpi.h5md"
    proc = run_mpi(N_WRITE, ["-m", "trajscale.cli.main", "convert", D.PSF, D.DCD, "-o", str(out), "--chunks", "3"],
                   timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(tmp_path.glob(".*tmp*"))
    with h5py.File(serial) as a, h5py.File(out) as b:
        for d in ("position/value", "position/step", "position/time"):
            np.testing.assert_array_equal(b[f"particles/all/{d}"][()], a[f"particles/all/{d}"][()], err_msg=d)
    import MDAnalysis as mda

    u, ref = mda.Universe(D.PSF, str(out)), mda.Universe(D.PSF, D.DCD)
    assert u.trajectory.n_frames == ref.trajectory.n_frames
    for ts, rts in zip(u.trajectory[::7], ref.trajectory[::7], strict=False):
        np.testing.assert_allclose(ts.positions, rts.positions, atol=1e-5)


#: The default (rank 0 writes what the others send) and MPI-IO collective writes: the paths whose traffic grows
#: with the ranks; every strategy is tested on 2 and 3 ranks (tests/pwrite/test_parallel_writer.py).
STRATEGIES = ("gather", "collective")


def test_8_ranks_parallel_writer_equals_serial(tmp_path):
    """ParallelWriter on 8 ranks (scattered domains of the AdK atoms, and frame blocks), gathered and
    collective, equals the serial writer's file bit for bit."""
    from tests.pwrite.frames import adk_frames
    from tests.pwrite.test_parallel_writer import assert_same_file, reference

    ref = reference(tmp_path / "plain.ref", adk_frames())
    outdir = tmp_path / "out"
    outdir.mkdir()
    proc = run_mpi(N_WRITE, [str(HERE.parent / "pwrite" / "pwrite_script.py"), "one", str(outdir),
                             ",".join(STRATEGIES)], timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for strategy in STRATEGIES:
        for name in (f"{strategy}.h5md", f"frames-{strategy}.h5md"):
            assert_same_file(outdir / name, ref)
