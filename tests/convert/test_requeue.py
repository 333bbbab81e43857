"""The SLURM requeue cycle: SIGTERM (a time limit), then the same command with ``--resume``, four times.

References: the size of a clean convert of the same inputs (the file may not grow with each
requeue) and MDAnalysis reading the inputs itself, frame by frame.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import mpiexec

INPUTS = [D.XTC] * 30   # 300 frames of AdK in water; protein only (3,341 atoms), uncompressed: ~12 MB
OPTS = ["--select", "protein", "--chunks", "5", "--no-progress"]
# slabs of a few frames: ~60 committed slabs, so a signal lands between two of them mid-file; each slab
# read takes 0.05 s more, so that on an idle machine too a convert lasts long enough for four signals
ENV = {"TRAJSCALE_CONVERT_SLAB_MB": "0.2", "TRAJSCALE_CONVERT_COUNT_MB": "0.2", "PYTHONUNBUFFERED": "1",
       "OMP_NUM_THREADS": "1", "TRAJSCALE_TEST_SLOW_READ": "0.05"}
#: The runs no signal waits for (the clean convert, the last resume): the same slabs, no slowed reads (an MPI
#: rank polls while its peer sleeps in one: CPU spent on nothing).
UNSLOWED = {k: v for k, v in ENV.items() if k != "TRAJSCALE_TEST_SLOW_READ"}
LAUNCH = {"serial": [], "processes": ["--executor", "processes", "-n", "2"]}


def _cmd(out, how: str, *extra) -> list[str]:
    cli = [sys.executable, "-m", "trajscale.cli.main", "convert", D.GRO, *INPUTS, "-o", str(out), *OPTS,
           *LAUNCH.get(how, []), *extra]
    return [mpiexec(), "-n", "2", *cli] if how == "mpi" else cli


def _counted(out) -> int:
    """Frames the progress records beside ``out`` count (one record, or one per worker range/segment)."""
    folder, name = os.path.dirname(out), os.path.basename(out)
    total = 0
    for r in glob.glob(f"{folder}/.{name}.convert-progress*.json") + \
            glob.glob(f"{folder}/.{name}.convert-parts/*.json"):
        try:
            with open(r) as fh:
                total += int(json.load(fh).get("done", 0) or 0)
        except (OSError, ValueError):
            continue
    return total


def _interrupt(out, how: str, resume: bool) -> None:
    """Start the convert and SIGTERM it once it has counted more frames than before."""
    before = _counted(out)
    env = dict(os.environ, **ENV)
    proc = subprocess.Popen(_cmd(out, how, *(["--resume"] if resume else [])), stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and _counted(out) <= before:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    assert "Traceback" not in err, err[-3000:]


@pytest.fixture(scope="module")
def mda_protein() -> np.ndarray:
    """The protein's positions in every frame of the inputs, MDAnalysis reading the XTCs itself (read once for
    the three executors' tests)."""
    u = mda.Universe(D.GRO, *INPUTS)
    sel = u.select_atoms("protein").indices
    return np.array([ts.positions[sel] for ts in u.trajectory])


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.parametrize("how", ["serial", "processes", pytest.param("mpi", marks=pytest.mark.mpi)])
def test_four_requeues_keep_the_size_of_a_clean_convert(tmp_path, how, mda_protein):
    if how == "mpi":
        pytest.importorskip("mpi4py")
    clean = tmp_path / "clean.h5md"
    r = subprocess.run(_cmd(clean, how), check=False, capture_output=True, text=True,
                       env=dict(os.environ, **UNSLOWED), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "requeued.h5md"
    interrupted = 0
    for cycle in range(4):
        _interrupt(out, how, resume=cycle > 0)
        if out.exists():   # finished before this cycle's signal: nothing more to interrupt
            break
        interrupted += 1   # (mpiexec's own exit status after a forwarded SIGTERM varies: the file counts)
    assert interrupted >= 2, "the convert was interrupted fewer than twice: the test proves nothing"
    r = subprocess.run(_cmd(out, how, "--resume"), check=False, capture_output=True, text=True,
                       env=dict(os.environ, **UNSLOWED), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    size, ref_size = out.stat().st_size, clean.stat().st_size
    print(f"{how}: {interrupted} interruptions, {size / 1e6:.2f} MB vs clean {ref_size / 1e6:.2f} MB")
    assert size <= 1.05 * ref_size, (size, ref_size)
    with h5py.File(out) as f:
        pos = f["particles/all/position/value"]
        assert pos.shape == mda_protein.shape
        for i, ref in enumerate(mda_protein):   # MDAnalysis reading the XTCs itself, frame by frame
            np.testing.assert_array_equal(pos[i], ref, err_msg=f"frame {i}")


@pytest.mark.cli
def test_inspect_and_verify_report_space_that_holds_no_data(tmp_path):
    """A file whose datasets were shrunk, closed and grown again (as a resume did) carries dead space:
    inspect says how much, and verify mentions it; a clean convert gets no such line."""
    from tests.conftest import run_cli
    from trajscale.convert.convert import convert

    out = tmp_path / "a.h5md"
    convert(D.GRO, [D.XTC], str(out))   # 10 frames x 47,681 atoms, uncompressed
    r = run_cli("inspect", str(out))
    assert r.returncode == 0 and "hold no data" not in r.stdout, r.stdout + r.stderr
    with h5py.File(out, "r+") as f:
        pos = f["particles/all/position/value"]
        before = pos[()]
        pos.resize(1, axis=0)
    with h5py.File(out, "r+") as f:   # regrown after a close: the freed chunks are not reused
        pos = f["particles/all/position/value"]
        pos.resize(len(before), axis=0)
        pos[1:] = before[1:]
    with h5py.File(out) as f:   # the reference: the file's size less what its datasets store
        sizes: list[int] = []
        f.visititems(lambda _n, o: sizes.append(o.id.get_storage_size()) if isinstance(o, h5py.Dataset) else None)
    stored = sum(sizes)
    unused = out.stat().st_size - stored
    assert unused > 0.2 * out.stat().st_size
    r = run_cli("inspect", str(out))
    assert r.returncode == 0 and "hold no data" in r.stdout, r.stdout + r.stderr
    assert f"{unused / 1e6:.1f} MB of it unused" in r.stdout, r.stdout
    r = run_cli("verify", D.GRO, D.XTC, str(out), "--no-progress")
    assert r.returncode == 0 and "NOTE:" in r.stdout and "hold no data" in r.stdout, r.stdout + r.stderr
