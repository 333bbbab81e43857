"""A resumed convert or rechunk says that it resumed and from which frame; an MPI convert shows its progress
from rank 0.

Each run is interrupted by SIGTERM once its progress record counts frames (as a time limit or a requeue
does); the frame a resume names is read from that record before the resume, and the resumed output is
compared with MDAnalysis reading the inputs itself.
"""

from __future__ import annotations

import functools
import os
import re
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
from trajscale.convert.resume import load_record, partial_paths

INPUTS = [D.XTC] * 30   # 300 frames of AdK in water; protein only
OPTS = ["--select", "protein", "--chunks", "5", "--compression", "gzip:1"]
ENV = {"TRAJSCALE_CONVERT_SLAB_MB": "0.2", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
#: The CLI with progress lines printed from the first tenth on (a log, not a terminal: stderr is a pipe).
MAIN = ("import sys; import trajscale.progress as p; p.PROGRESS_LINE_DELAY = 0.0; "
        "from trajscale.cli.main import main; sys.exit(main(sys.argv[1:]))")


def _cmd(out, mpi: bool, *extra) -> list[str]:
    cli = [sys.executable, "-c", MAIN, "convert", D.GRO, *INPUTS, "-o", str(out), *OPTS, *extra]
    return [mpiexec(), "-n", "2", *cli] if mpi else cli


def _interrupt(out, mpi: bool) -> int:
    """Start the convert, SIGTERM it once its record counts frames; the frames it counts."""
    record = partial_paths(out, "convert")[1]
    env = dict(os.environ, **ENV, TRAJSCALE_TEST_SLOW_READ="0.05")
    proc = subprocess.Popen(_cmd(out, mpi, "--no-progress"), stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not (load_record(record) or {}).get("done"):
        time.sleep(0.02)
    assert proc.poll() is None, "the convert ended before it could be interrupted: " + proc.stderr.read()[-2000:]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    assert "terminated by signal 15" in err and "Traceback" not in err, err[-3000:]
    done = int(load_record(record)["done"])
    assert 0 < done < 300, done
    return done


@functools.cache
def _mda_protein() -> np.ndarray:
    """The protein's positions in every frame, MDAnalysis reading the inputs itself (once per process)."""
    u = mda.Universe(D.GRO, *INPUTS)
    sel = u.select_atoms("protein").indices
    return np.array([ts.positions[sel] for ts in u.trajectory], dtype=np.float32)


def _check_output(out) -> None:
    with h5py.File(out) as f:
        np.testing.assert_array_equal(f["particles/all/position/value"][()], _mda_protein())


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.parametrize("mpi", [False, pytest.param(True, marks=pytest.mark.mpi)])
def test_a_resumed_convert_says_from_which_frame(tmp_path, mpi):
    if mpi:
        pytest.importorskip("mpi4py")
    out = tmp_path / "out.h5md"
    done = _interrupt(out, mpi)
    r = subprocess.run(_cmd(out, mpi, "--resume"), capture_output=True, text=True, env=dict(os.environ, **ENV),
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    said = [line for line in r.stderr.splitlines() if "resuming" in line]
    assert said == [f"trajscale: resuming {out} from frame {done} of 300"], r.stderr[-3000:]
    progress = re.findall(r"convert: (\d+)% \((\d+)/300 frames", r.stderr)
    assert progress, r.stderr[-3000:]   # an MPI convert shows progress too (rank 0's)
    assert len(progress) == len(set(progress)), r.stderr[-3000:]   # each line once: from one rank
    assert int(progress[0][1]) > done and progress[-1] == ("100", "300"), progress
    assert r.stderr.count(f"wrote {out}") == 1, r.stderr[-3000:]
    _check_output(out)


@pytest.mark.cli
def test_a_fresh_convert_says_nothing_of_resuming(tmp_path):
    out = tmp_path / "out.h5md"
    r = subprocess.run(_cmd(out, False, "--resume", "--stop", "20"), capture_output=True, text=True,
                       env=dict(os.environ, **ENV), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "nothing to resume" in r.stderr and "resuming" not in r.stderr, r.stderr


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.parametrize("mpi", [False, pytest.param(True, marks=pytest.mark.mpi)])
def test_a_resumed_rechunk_says_from_which_frame(tmp_path, mpi):
    """Serial: the record counts each series' frames (the resume starts at the fewest); under mpiexec the
    ranks write one file in counted rounds."""
    if mpi:
        pytest.importorskip("mpi4py")
    from trajscale.convert.convert import convert

    src = tmp_path / "in.h5md"
    convert(D.GRO, INPUTS, str(src), select="protein")   # 300 frames, 3341 atoms, uncompressed
    out = tmp_path / "re.h5md"
    cli = [sys.executable, "-c", MAIN, "rechunk", str(src), "-o", str(out), "--chunks", "5", "--compression",
           "gzip:1", "--precision", "0.01"]
    cmd = [mpiexec(), "-n", "2", *cli] if mpi else cli
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TRAJSCALE_RECHUNK_SLAB_MB="0.1")
    record = partial_paths(out, "rechunk")[1]

    def counted() -> int:
        done = (load_record(record) or {}).get("done") or 0
        return min(done.values(), default=0) if isinstance(done, dict) else int(done)
    proc = subprocess.Popen([*cmd, "--no-progress"], stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not counted():
        time.sleep(0.01)
    assert proc.poll() is None, "the rechunk ended before it could be interrupted: " + proc.stderr.read()[-2000:]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    assert "terminated by signal 15" in err and "Traceback" not in err, err[-3000:]
    done = counted()
    assert 0 < done < 300, done
    r = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    said = [line for line in r.stderr.splitlines() if "resuming" in line]
    assert said == [f"trajscale: resuming {out} from frame {done} of 300"], r.stderr[-3000:]
    with h5py.File(out) as f, h5py.File(src) as g:   # within the stated bound of the input's values
        assert np.abs(f["particles/all/position/value"][()] - g["particles/all/position/value"][()]).max() \
            <= 0.005 + 1e-5
