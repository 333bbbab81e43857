"""The MPI executor under ``mpiexec -n 1, 2, 3``: same numbers as serial, clean failures.

Every test launches ``mpiexec`` in a subprocess (oversubscribed on small
machines) with ``mpi_rmsd_script.py`` or the CLI.
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
from pathlib import Path

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

import trajscale as ts
from tests.conftest import run_mpi
from trajscale.parallel import h5py_has_mpi

pytest.importorskip("mpi4py")
pytestmark = pytest.mark.mpi
#: Tests of MPI-IO skip, with the reason, where h5py was built without MPI.
needs_mpio = pytest.mark.skipif(not h5py_has_mpi(), reason="h5py is built without MPI (no parallel HDF5)")
MPIO = pytest.param("mpio", marks=needs_mpio)

SCRIPT = str(Path(__file__).with_name("mpi_rmsd_script.py"))
GROUPS = ["backbone", "resid 1-50"]


@pytest.fixture(scope="module")
def serial_table(adk_vacuum, adk_vacuum_h5md):
    return ts.run(ts.RMSD(select="name CA", groupselections=GROUPS), adk_vacuum[0], adk_vacuum_h5md).table()


@pytest.fixture(scope="module")
def mda_table(adk_vacuum):
    u = mda.Universe(*adk_vacuum)
    return rms.RMSD(u, select="name CA", groupselections=GROUPS).run().results.rmsd


def run_script(n: int, tmp_path: Path, topology: str, trajectory: str, *extra: str, timeout: float = 120):
    out = tmp_path / f"r{n}.npz"
    args = [SCRIPT, topology, trajectory, "--out", str(out)]
    for g in GROUPS:
        args += ["--group", g]
    proc = run_mpi(n, [*args, *extra], timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    z = np.load(out)
    return z["table"], json.loads(str(z["report"])), json.loads(str(z["options"]))


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("driver", [MPIO, "default"])
def test_h5md_equals_serial_and_mdanalysis(tmp_path, adk_vacuum, adk_vacuum_h5md, serial_table, mda_table,
                                           n, driver):
    table, report, opts = run_script(n, tmp_path, adk_vacuum[0], adk_vacuum_h5md, "--driver", driver)
    assert opts["driver"] == (None if driver == "default" else "mpio")
    np.testing.assert_array_equal(table, serial_table)
    np.testing.assert_allclose(table, mda_table, atol=1e-4, rtol=0)
    assert report["n_workers"] == n and report["executor"] == "mpi"
    workers = report["workers"]
    assert [w["worker"] for w in workers] == [f"rank {r}" for r in range(n)]
    assert sum(w["frames"] for w in workers) == 98
    # each rank reads one contiguous region: its tasks are consecutive
    for w in workers:
        mine = [t for t in report["tasks"] if t["worker"] == w["worker"]]
        assert all(a["stop"] == b["start"] for a, b in itertools.pairwise(mine))
    assert workers[0]["t_init_top"] > 0 and all(w["t_init_traj"] > 0 for w in workers)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_dcd_through_mdanalysis_source(tmp_path, adk_vacuum, serial_table, mda_table, n):
    table, report, _ = run_script(n, tmp_path, *adk_vacuum)
    np.testing.assert_array_equal(table, serial_table)
    np.testing.assert_allclose(table, mda_table, atol=1e-4, rtol=0)
    assert report["n_workers"] == n


@needs_mpio
def test_idle_ranks_still_reported(tmp_path, adk_vacuum, adk_vacuum_h5md, serial_table):
    """More ranks than tasks: idle ranks open and close the file with the others and appear."""
    table, report, _ = run_script(3, tmp_path, adk_vacuum[0], adk_vacuum_h5md, "--driver", "mpio",
                                  "--tasks", "2")
    np.testing.assert_array_equal(table, serial_table)
    assert [w["worker"] for w in report["workers"]] == ["rank 0", "rank 1", "rank 2"]
    assert [w["n_tasks"] for w in report["workers"]] == [1, 1, 0]   # idle ranks last


@needs_mpio
def test_collective_reads(tmp_path, adk_vacuum, adk_vacuum_h5md, serial_table):
    """The report says whether every rank's reads were really collective."""
    table, report, _ = run_script(2, tmp_path, adk_vacuum[0], adk_vacuum_h5md, "--driver", "mpio",
                                  "--collective", "--tasks", "4")
    assert report["meta"]["io"] == {"driver": "mpio", "collective_requested": True, "collective": True}
    np.testing.assert_array_equal(table, serial_table)


@needs_mpio
def test_collective_reads_fall_back_and_say_so(tmp_path, adk_vacuum, adk_vacuum_h5md, serial_table):
    """3 tasks on 2 ranks cannot be read collectively: the report records the fallback."""
    table, report, _ = run_script(2, tmp_path, adk_vacuum[0], adk_vacuum_h5md, "--driver", "mpio",
                                  "--collective", "--tasks", "3")
    assert report["meta"]["io"] == {"driver": "mpio", "collective_requested": True, "collective": False}
    np.testing.assert_array_equal(table, serial_table)


def test_cli_writes_outputs_once(tmp_path, adk_vacuum, adk_vacuum_h5md, serial_table):
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "run", "rmsd", adk_vacuum[0], adk_vacuum_h5md,
                       "--select", "name CA", "--executor", "mpi", "--out", "x.csv", "--report", "r.json"],
                   cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("rmsd on mpi x2") == 1     # the summary comes from rank 0 only
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "x.csv"]
    csv = np.loadtxt(tmp_path / "x.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(csv[:, 2], serial_table[:, 2], atol=1e-8)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["n_workers"] == 2 and len(report["workers"]) == 2
    for w in report["workers"]:
        assert "t_wait" in w and "t_comm" in w and w["t_comm"] > 0
        assert w["host"] and w["pid"] > 0


#: A failing job must end, not hang: seconds, about 3 s idle; 120 leaves a loaded 2-core machine's MPI start-up
#: (three ranks importing MDAnalysis) room, and a hang still runs into it.
ABORT_S = 120


def _assert_aborted(proc, started: float, needle: str) -> None:
    assert proc.returncode != 0
    assert time.monotonic() - started < ABORT_S
    assert needle in proc.stderr, proc.stderr[-3000:]


def test_rank_failure_aborts_job(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """NaN coordinates in frames owned by rank 1: one line naming rank 1, the job ends."""
    bad = tmp_path / "nan.h5md"
    shutil.copy(adk_vacuum_h5md, bad)
    with h5py.File(bad, "r+") as f:
        f["particles/all/position/value"][80:83] = np.nan
    started = time.monotonic()
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "run", "rmsd", adk_vacuum[0], str(bad), "--executor", "mpi",
                       "--out", "x.csv"], cwd=tmp_path, timeout=ABORT_S)
    _assert_aborted(proc, started, "rank 1 failed on frames [")
    assert "frame 80" in proc.stderr
    assert not (tmp_path / "x.csv").exists()


def test_failing_map_aborts_job(tmp_path, adk_vacuum, adk_vacuum_h5md):
    started = time.monotonic()
    proc = run_mpi(3, [SCRIPT, adk_vacuum[0], adk_vacuum_h5md, "--out", str(tmp_path / "r.npz"),
                       "--fail-frames", "40:41"], timeout=ABORT_S)
    _assert_aborted(proc, started, "rank 1 failed on frames [")
    assert "injected failure" in proc.stderr
    assert not (tmp_path / "r.npz").exists()


def test_prepare_failure_on_root_does_not_hang(tmp_path, adk_vacuum, adk_vacuum_h5md):
    started = time.monotonic()
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "run", "rmsd", adk_vacuum[0], adk_vacuum_h5md,
                       "--select", "name XYZ", "--executor", "mpi"], cwd=tmp_path, timeout=ABORT_S)
    _assert_aborted(proc, started, "selects no atoms")
    assert proc.stderr.count("error:") == 1, proc.stderr   # printed by rank 0, not once per rank


@pytest.mark.parametrize("k,n", [(8, 2), (12, 3), (2, 3), (7, 4), (1, 5), (98, 3)])
def test_rank_tasks_contiguous_and_balanced(k, n):
    from trajscale.executors.mpi import rank_tasks

    groups = [rank_tasks(k, n, r) for r in range(n)]
    assert [i for g in groups for i in g] == list(range(k))
    sizes = [len(g) for g in groups]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
