"""``mpiexec -n 2 trajscale convert``: interrupted (SIGTERM to mpiexec, or a rank killed), then ``--resume``.

References: an uninterrupted ``mpiexec -n 2`` convert of the same inputs (every dataset and attribute),
MDAnalysis reading the inputs itself (positions, box, time), and ``verify``.
"""

from __future__ import annotations

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

from tests.conftest import mpiexec, run_mpi
from tests.convert.test_parallel_convert import mda_frames
from tests.h5md.test_rechunk import assert_same_tree
from trajscale.convert.resume import load_record, partial_paths
from trajscale.convert.verify import verify

pytest.importorskip("mpi4py")
pytestmark = pytest.mark.mpi

INPUTS = [D.XTC] * 12   # 120 frames of AdK in water; protein only, so the files stay small
OPTS = ["--select", "protein", "--chunks", "5", "--compression", "gzip:1", "--no-progress"]
# slabs of ~5 frames per rank: ~12 rounds, each counted in the record
ENV = {"TRAJSCALE_CONVERT_SLAB_MB": "0.2"}
#: The run a signal stops reads each slab 0.25 s longer: it lasts (3 s a rank) until the signal lands on a
#: loaded machine, without decoding hundreds of frames to last.
SLOWED = {**ENV, "TRAJSCALE_TEST_SLOW_READ": "0.25"}


def _cli(out, *extra):
    return ["-m", "trajscale.cli.main", "convert", D.GRO, *INPUTS, "-o", str(out), *OPTS, *extra]


def _start(out):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **SLOWED)
    return subprocess.Popen([mpiexec(), "-n", "2", sys.executable, *_cli(out)], stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)


def _wait_for_count(proc, record, deadline_s=240):
    deadline = time.time() + deadline_s
    while time.time() < deadline and proc.poll() is None:
        if (load_record(record) or {}).get("done", 0) > 0:
            return
        time.sleep(0.02)


def _ranks(out) -> dict[int, int]:
    """rank -> pid of the Python ranks converting to ``out`` (read from /proc: hydra's proxy starts them)."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        rank = [e.split(b"=", 1)[1] for e in env if e.startswith(b"PMI_RANK=")]
        if rank and str(out).encode() in cmd and b"trajscale.cli.main" in cmd:
            found[int(rank[0])] = int(d)
    return found


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The reference both resumes are compared with: an uninterrupted ``mpiexec -n 2`` convert of the same
    inputs and options (made once for the module)."""
    whole = tmp_path_factory.mktemp("uninterrupted") / "whole.h5md"
    r = run_mpi(2, _cli(whole), timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    return whole


@pytest.fixture(scope="module")
def mda_protein():
    """The protein's positions in every frame, MDAnalysis reading the 12 XTCs itself (once for the module)."""
    ref = mda_frames(D.GRO, INPUTS)[0]
    sel = mda.Universe(D.GRO).select_atoms("protein").indices
    return ref[:, sel].astype(np.float32)


def _resume_and_compare(tmp_path, out, record, uninterrupted, mda_protein):
    r = run_mpi(2, _cli(out, "--resume"), timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resumed.h5md"]
    assert_same_tree(uninterrupted, out)
    with h5py.File(out) as f:
        pg = f["particles/all"]
        assert pg["position/value"].shape == mda_protein.shape == (120, 3341, 3)
        np.testing.assert_array_equal(pg["position/value"][()], mda_protein)
        np.testing.assert_array_equal(np.diff(pg["position/step"][()]) > 0, True)   # renumbered, increasing
    rep = verify(D.GRO, INPUTS, str(out), select="protein")
    assert rep.ok and rep.n_frames == 120, rep.problems


@pytest.mark.slow
def test_sigterm_to_mpiexec_then_resume_equals_uninterrupted(tmp_path, uninterrupted, mda_protein):
    out = tmp_path / "resumed.h5md"
    tmp, record = partial_paths(out, "convert")
    proc = _start(out)
    _wait_for_count(proc, record)
    assert proc.poll() is None, "convert finished before it could be interrupted: " + proc.stderr.read()[-2000:]
    assert tmp.exists() and record.exists(), "no partial output and progress record when signalled"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    # (mpiexec's own exit status after a forwarded SIGTERM varies between runs: the ranks' words count)
    assert "terminated by signal 15" in err and "Traceback" not in err and " of 120 frames written" not in err, err
    assert err.count("--resume") == 1, err   # said once (rank 0), not once per rank
    assert not out.exists() and tmp.exists() and record.exists()
    done = load_record(record)["done"]
    assert 0 < done < 120 and done % 5 == 0, done
    # a resume with other options is refused, the partial output kept
    other = ["-m", "trajscale.cli.main", "convert", D.GRO, *INPUTS, "-o", str(out), "--select", "protein",
             "--chunks", "10", "--compression", "gzip:1", "--no-progress", "--resume"]
    r = run_mpi(2, other, env=ENV)
    assert r.returncode != 0 and "start again without --resume" in r.stderr, r.stderr[-2000:]
    assert r.stderr.count("start again") == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert record.exists() and tmp.exists()
    _resume_and_compare(tmp_path, out, record, uninterrupted, mda_protein)


@pytest.mark.slow
def test_a_killed_rank_then_resume_equals_uninterrupted(tmp_path, uninterrupted, mda_protein):
    out = tmp_path / "resumed.h5md"
    tmp, record = partial_paths(out, "convert")
    proc = _start(out)
    _wait_for_count(proc, record)
    assert proc.poll() is None, "convert finished before it could be interrupted"
    ranks = _ranks(out)
    assert sorted(ranks) == [0, 1], ranks
    os.kill(ranks[1], signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert not out.exists() and tmp.exists() and 0 < load_record(record)["done"] < 120
    _resume_and_compare(tmp_path, out, record, uninterrupted, mda_protein)


@pytest.mark.parametrize("virtual", [False, True])
def test_mpi_rechunk_sigterm_then_resume_equals_serial(tmp_path, virtual):
    """``mpiexec -n 2 trajscale rechunk``: the ranks write one file through parallel HDF5 (or, with
    --virtual, each rank its segment); SIGTERM, then --resume: the file a serial rechunk writes."""
    from trajscale.convert.convert import convert
    from trajscale.convert.rechunk import rechunk
    from trajscale.h5md.layout import Layout

    src = tmp_path / "in.h5md"
    convert(D.GRO, [D.XTC] * 30, str(src), select="protein")   # 300 frames, 3341 atoms, uncompressed
    out = tmp_path / "re.h5md"
    opts = ["--chunks", "5", "--compression", "gzip:1", "--precision", "0.01", "--no-progress",
            *(["--virtual"] if virtual else [])]
    cmd = ["-m", "trajscale.cli.main", "rechunk", str(src), "-o", str(out), *opts]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TRAJSCALE_RECHUNK_SLAB_MB="0.2")
    proc = subprocess.Popen([mpiexec(), "-n", "2", sys.executable, *cmd], stderr=subprocess.PIPE, text=True,
                            env=env)
    parts = tmp_path / ".re.h5md.rechunk-parts"
    tmp, record = partial_paths(out, "rechunk")

    def counted() -> list[int]:
        if not virtual:   # one record, of the frames every series has on disk
            return [int((load_record(record) or {}).get("done", 0))]
        return [min((load_record(r) or {}).get("done", {}).values(), default=0) for r in parts.glob("*.progress.json")]
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        done = counted()
        if len(done) == (2 if virtual else 1) and min(done) > 0:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "rechunk finished before it could be interrupted: " + proc.stderr.read()[-2000:]
    if virtual:
        assert record.exists() and len(list(parts.glob("part_*.h5md"))) == 2, "no segments and record when signalled"
    else:
        assert record.exists() and tmp.exists() and not parts.exists(), "one partial file, no segments"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert "terminated by signal 15" in err and err.count("--resume") == 1 and "Traceback" not in err, err
    assert not out.exists() and record.exists()
    done = counted()
    assert 0 < sum(done) < 300, done
    r = run_mpi(2, [*cmd, "--resume"], timeout=300, env={"TRAJSCALE_RECHUNK_SLAB_MB": "0.2"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5md", "re.h5md", *(["re.parts"] if virtual else [])]
    serial = tmp_path / "serial" / "re.h5md"
    serial.parent.mkdir()
    rechunk(src, serial, Layout.parse("5", "gzip:1"), precision=0.01)
    assert_same_tree(serial, out)
    with h5py.File(out) as f, h5py.File(src) as g:   # within the stated bound of the input's values
        got, ref = f["particles/all/position/value"], g["particles/all/position/value"][()]
        assert got.is_virtual == virtual
        if not virtual:
            assert got.chunks == (5, 3341, 3) and got.compression == "gzip"
        assert np.abs(got[()] - ref).max() <= 0.005 + 1e-5


def test_mpi_rechunk_writes_one_file_equal_to_serial_for_each_codec(tmp_path, adk_vacuum_h5md):
    """Without --virtual no segments are made: rank 0 creates the output, both ranks write their slabs
    collectively (uncompressed, gzip and delta-coded blosc-lz4); the stored values equal a serial run's."""
    from trajscale.convert.rechunk import rechunk
    from trajscale.h5md.layout import Layout

    for name, opts in (("plain", ["--compression", "none"]), ("gzip", ["--compression", "gzip:1"]),
                       ("deltas", ["--compression", "blosc-lz4", "--precision", "0.01", "--encoding", "deltas"])):
        out, serial = tmp_path / f"{name}.h5md", tmp_path / f"{name}.serial.h5md"
        r = run_mpi(2, ["-m", "trajscale.cli.main", "rechunk", adk_vacuum_h5md, "-o", str(out), "--chunks", "7",
                        *opts, "--no-progress"], timeout=300, env={"TRAJSCALE_RECHUNK_SLAB_MB": "0.3"})
        assert r.returncode == 0, r.stderr[-3000:]
        comp = opts[1]
        rechunk(adk_vacuum_h5md, serial, Layout.parse("7", comp), precision=0.01 if name == "deltas" else None,
                encoding="deltas" if name == "deltas" else "floats")
        assert_same_tree(serial, out)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f"{name}.") or
                      p.name.startswith(f".{name}")) == [f"{name}.h5md", f"{name}.serial.h5md"]
