"""Following trajectories while they are written (``trajscale.run(..., follow=True)``).

A real writer runs in another process: ParallelWriter growing an H5MD file frame by frame, or an
XTC's bytes appended in pieces that end inside frames. The followed result must have the same bits
as a run over the finished file, and equal MDAnalysis's own RMSD of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import DCD, PSF, TPR, XTC

import trajscale as ts
from tests.conftest import ROOT, run_mpi
from trajscale.follow import FollowOptions, last_line
from trajscale.xdr.follow import complete_offsets

warnings.filterwarnings("ignore", module="MDAnalysis")

EXECUTORS = ["serial", "processes", "dask"]


def producer(*args: str, hold: Path | None = None, environ: dict | None = None) -> subprocess.Popen:
    """A writer process (``tests/sources/follow_producers.py``), in ``environ`` (default: this process's);
    with ``hold`` it pauses after 10 frames until that file exists."""
    env = dict(os.environ if environ is None else environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
    if hold is not None:
        env["FOLLOW_HOLD"] = str(hold)
    return subprocess.Popen([sys.executable, "-m", "tests.sources.follow_producers", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def killed_producer(out: Path, after: int = 30) -> None:
    """``out`` as a ParallelWriter producer SIGKILLed after writing ``after`` frames leaves it (never
    marked complete)."""
    writer = producer("h5md", str(out), "0.02", str(after))
    try:
        for line in writer.stdout:   # the writer has written them and waits
            if line.split() == ["wrote", str(after)]:
                break
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
    finally:
        writer.kill()
        writer.wait()


def mda_rmsd(top: str, traj: str) -> np.ndarray:
    u = mda.Universe(top, traj)
    return rms.RMSD(u.select_atoms("name CA")).run().results.rmsd[:, 2]


@pytest.fixture(scope="module")
def mda_adk_rmsd():
    return mda_rmsd(PSF, DCD)


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.parametrize("executor", EXECUTORS)
def test_growing_h5md_followed_to_its_end_equals_the_finished_file(tmp_path, executor, mda_adk_rmsd):
    if executor == "dask":
        pytest.importorskip("distributed")
    out = tmp_path / "growing.h5md"
    writer = producer("h5md", str(out), "0.02")
    updates = []
    try:
        r = ts.run(ts.RMSD(select="name CA"), PSF, str(out), executor=executor, n_workers=2,
                   follow=FollowOptions(idle=120, poll=0.1, every_s=0.5, wait=120),
                   on_update=lambda res: updates.append(len(res.rmsd)))
    finally:
        assert writer.wait(timeout=300) == 0
    full = ts.run(ts.RMSD(select="name CA"), PSF, str(out))
    assert r.report.meta.follow.ended == "complete", last_line(r)
    assert len(r.rmsd) == 98
    assert np.array_equal(r.rmsd, full.rmsd) and np.array_equal(r.times, full.times)
    np.testing.assert_allclose(r.rmsd, mda_adk_rmsd, rtol=1e-5, atol=1e-5)
    assert updates[-1] == 98 and updates == sorted(updates)


@pytest.mark.slow
@pytest.mark.cli
def test_rmsf_followed_has_the_bits_of_the_finished_file(tmp_path):
    """An accumulating analysis: its exact sums over frames that arrived in rounds give the same bits.
    The writer holds after 10 frames, its file open and locked, until the follower has published its
    first round: the frames surely come in several rounds."""
    out, go = tmp_path / "growing.h5md", tmp_path / "go"
    writer = producer("h5md", str(out), "0.02", hold=go)
    try:
        r = ts.run(ts.RMSF(select="name CA"), PSF, str(out),
                   follow=FollowOptions(idle=120, poll=0.05, wait=120, every_frames=1),
                   on_update=lambda res: go.touch())
    finally:
        go.touch()
        assert writer.wait(timeout=300) == 0
    assert r.report.meta.follow.ended == "complete" and len(r.report.tasks) > 1
    full = ts.run(ts.RMSF(select="name CA"), PSF, str(out))
    assert np.array_equal(r.rmsf, full.rmsf)
    u = mda.Universe(PSF, DCD)
    np.testing.assert_allclose(r.rmsf, rms.RMSF(u.select_atoms("name CA")).run().results.rmsf, rtol=1e-4, atol=1e-5)


@pytest.mark.cli
def test_a_writer_holding_its_lock_is_followed_by_a_process_that_opened_hdf5_before(tmp_path):
    """HDF5 reads ``HDF5_USE_FILE_LOCKING`` at a process's first open: a notebook that opened any HDF5
    file before following still reads the file whose writer holds its lock."""
    env = {k: v for k, v in os.environ.items() if k != "HDF5_USE_FILE_LOCKING"}
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
    out = tmp_path / "held.h5md"
    writer = producer("h5md", str(out), "0", "5", environ=env)
    script = ("import sys, h5py, numpy as np\n"
              "from trajscale.sources.follow import snapshot\n"
              "with h5py.File(sys.argv[2], 'w') as f:\n    f['x'] = 1\n"   # HDF5 starts, its lock on
              "snap = snapshot(sys.argv[1])\n"
              "np.save(sys.argv[3], snap.source.read(0, snap.n_frames).positions)\n")
    try:
        for line in writer.stdout:   # 5 frames written; the writer keeps the file open
            if line.split() == ["wrote", "5"]:
                break
        got = subprocess.run([sys.executable, "-c", script, str(out), str(tmp_path / "other.h5"),
                              str(tmp_path / "read.npy")], env=env, capture_output=True, text=True, timeout=120)
    finally:
        writer.kill()
        writer.wait()
    assert got.returncode == 0, got.stderr[-2000:]
    positions = np.load(tmp_path / "read.npy")
    u = mda.Universe(PSF, DCD)
    assert len(positions) >= 5
    assert np.array_equal(positions, np.stack([ts_.positions for ts_ in u.trajectory[:len(positions)]]))


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.parametrize("executor", EXECUTORS)
def test_xtc_appended_in_pieces_is_read_only_in_whole_frames(tmp_path, executor):
    if executor == "dask":
        pytest.importorskip("distributed")
    out, go = tmp_path / "growing.xtc", tmp_path / "go"
    # frames are ~165 kB: most pieces end mid-frame; the writer holds after 10 pieces (3 whole frames)
    # until the follower has published its first round, so the frames surely come in several rounds
    writer = producer("xtc", XTC, str(out), "0.1", "60000", hold=go)
    try:
        r = ts.run(ts.RMSD(select="name CA"), TPR, str(out), executor=executor, n_workers=2,
                   follow=FollowOptions(idle=120, poll=0.05, wait=120, every_frames=1),
                   on_update=lambda res: go.touch())
    finally:
        go.touch()
        assert writer.wait(timeout=300) == 0
    assert r.report.meta.follow.ended == "complete"
    full = ts.run(ts.RMSD(select="name CA"), TPR, str(out))
    assert len(r.report.tasks) > 1
    assert np.array_equal(r.rmsd, full.rmsd)
    np.testing.assert_allclose(r.rmsd, mda_rmsd(TPR, XTC), rtol=1e-5, atol=1e-5)


def test_complete_frames_of_a_cut_xtc_are_mdanalysis_offsets(tmp_path):
    """A file cut anywhere gives the frames whose every byte is there, at MDAnalysis's offsets."""
    offsets = np.asarray(mda.Universe(TPR, XTC).trajectory._xdr.offsets)
    data = Path(XTC).read_bytes()
    ends = np.append(offsets[1:], len(data))   # where each frame's last byte is
    for cut in (int(offsets[3]), int(offsets[3]) + 10, int(offsets[3]) + 5000, int(offsets[4]) - 1, len(data)):
        part = tmp_path / "cut.xtc"
        part.write_bytes(data[:cut])
        n_atoms, got, _ = complete_offsets(str(part), "XTC")
        assert n_atoms == 47681
        assert np.array_equal(got, offsets[ends <= cut]), cut


@pytest.mark.slow
@pytest.mark.cli
def test_killed_writer_leaves_every_complete_frame_analysed(tmp_path):
    out = tmp_path / "killed.h5md"
    writer = producer("h5md", str(out), "0.02", "30")
    try:
        for line in writer.stdout:   # the writer has written 30 frames and waits
            if line.split() == ["wrote", "30"]:
                break
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
        t0 = time.monotonic()
        r = ts.run(ts.RMSD(select="name CA"), PSF, str(out), follow=FollowOptions(idle=3, poll=0.1))
    finally:
        writer.kill()
        writer.wait()
    assert time.monotonic() - t0 < 120
    assert r.report.meta.follow.ended == "idle"
    assert last_line(r) == (f"followed {len(r.rmsd)} frames; ended: no new frame for 3 s; the file was never "
                            "marked complete")
    full = ts.run(ts.RMSD(select="name CA"), PSF, str(out))   # what the killed writer left complete
    assert len(r.rmsd) >= 29 and np.array_equal(r.rmsd, full.rmsd)
    np.testing.assert_allclose(r.rmsd, mda_rmsd(PSF, DCD)[:len(r.rmsd)], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.mpi
def test_follow_under_mpi(tmp_path, mda_adk_rmsd):
    out = tmp_path / "growing.h5md"
    writer = producer("h5md", str(out), "0.02")
    try:
        proc = run_mpi(2, [str(ROOT / "tests/sources/mpi_follow_script.py"), str(out), str(tmp_path / "r.npy")],
                       timeout=400, env={"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"})
    finally:
        assert writer.wait(timeout=300) == 0
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(tmp_path / "r.npy")
    full = ts.run(ts.RMSD(select="name CA"), PSF, str(out))
    assert len(got) == 98 and np.array_equal(got, full.rmsd)
    np.testing.assert_allclose(got, mda_adk_rmsd, rtol=1e-5, atol=1e-5)


@pytest.mark.mpi
def test_xtc_followed_under_mpi(tmp_path):
    out = tmp_path / "growing.xtc"
    writer = producer("xtc", XTC, str(out), "0.1", "60000")
    try:
        proc = run_mpi(2, [str(ROOT / "tests/sources/mpi_follow_script.py"), str(out), str(tmp_path / "r.npy"),
                           "xtc"], timeout=400, env={"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"})
    finally:
        assert writer.wait(timeout=300) == 0
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(tmp_path / "r.npy")
    full = ts.run(ts.RMSD(select="name CA"), TPR, str(out))
    assert np.array_equal(got, full.rmsd)
    np.testing.assert_allclose(got, mda_rmsd(TPR, XTC), rtol=1e-5, atol=1e-5)


def test_nothing_to_follow_is_one_clear_error(tmp_path):
    with pytest.raises(ts.errors.InputFileError, match="no complete frame to follow within"):
        ts.run(ts.RMSD(), PSF, str(tmp_path / "never.h5md"), follow=FollowOptions(idle=1, poll=0.1))


@pytest.mark.slow
@pytest.mark.cli
def test_segment_index_gaining_parts(tmp_path):
    """An index rewritten as parts arrive (``trajscale index ... --overwrite``), then ``INDEX.done``."""
    import threading

    u = mda.Universe(PSF, DCD)
    parts = []
    for k, (a, b) in enumerate([(0, 30), (30, 60), (60, 80), (80, 98)]):
        parts.append(str(tmp_path / f"part{k}.dcd"))
        with mda.Writer(parts[-1], u.atoms.n_atoms) as w:
            for _ in u.trajectory[a:b]:
                w.write(u.atoms)
    index = tmp_path / "run.json"

    def write_index(n: int) -> None:
        proc = subprocess.run([sys.executable, "-m", "trajscale.cli.main", "index", *parts[:n], "--topology", PSF,
                               "-o", str(index), "--overwrite"],
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr

    write_index(2)

    def grow() -> None:
        for n in (3, 4):
            time.sleep(1.0)
            write_index(n)
        Path(str(index) + ".done").touch()

    t = threading.Thread(target=grow)
    t.start()
    try:
        r = ts.run(ts.RMSD(select="name CA"), PSF, str(index), executor="processes", n_workers=2,
                   follow=FollowOptions(idle=120, poll=0.1))
    finally:
        t.join()
    assert r.report.meta.follow.ended == "complete"
    full = ts.run(ts.RMSD(select="name CA"), PSF, str(index))
    assert len(r.rmsd) == 98 and np.array_equal(r.rmsd, full.rmsd)
    np.testing.assert_allclose(r.rmsd, mda_rmsd(PSF, DCD), rtol=1e-5, atol=1e-5)


def test_a_reopen_that_meets_the_writer_mid_flush_is_tried_again(tmp_path, adk_vacuum_h5md):
    """A growing file whose read fails and whose reopen then fails too (its bytes unreadable for a moment, as
    a writer's flush leaves them): the source looks again, and once the bytes are whole reads h5py's frames."""
    import shutil
    import threading

    import h5py

    from trajscale.h5md.follow import GrowingH5MDSource

    path = tmp_path / "growing.h5md"
    shutil.copy(adk_vacuum_h5md, path)
    whole = path.read_bytes()
    src = GrowingH5MDSource(str(path))
    try:
        with open(path, "r+b") as f:   # the same file (inode), unreadable for a moment: cut, its superblock zeroed
            f.write(b"\0" * 4096)
            f.truncate(4096)
        restore = threading.Timer(0.4, lambda: path.write_bytes(whole))
        restore.start()
        block = src.read(0, 3)
        restore.join()
    finally:
        src.close()
    with h5py.File(adk_vacuum_h5md) as f:
        np.testing.assert_allclose(block.positions, f["particles/all/position/value"][0:3], rtol=1e-6)


def test_a_growing_file_rewritten_in_place_is_read_as_it_is_now(tmp_path, adk_vacuum_h5md):
    """A writer fills the rows it reserved and rewrites the metadata in place, at the same size: the growing
    file's reads go on (a finished file's would be refused as rewritten). Another file under the name is the
    follower's to notice (its look compares the inode first seen)."""
    import shutil

    import h5py

    from trajscale.h5md.follow import GrowingH5MDSource

    path = tmp_path / "growing.h5md"
    shutil.copy(adk_vacuum_h5md, path)
    src = GrowingH5MDSource(str(path))
    try:
        head = src.store.first_bytes(64)
        with open(path, "r+b") as f:   # the same bytes written again: the same size, a later modification time
            f.write(head)
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        assert src.store.read_ranges([(0, 64)]) == [head]
        block = src.read(0, 3)
        with h5py.File(adk_vacuum_h5md) as f:
            np.testing.assert_allclose(block.positions, f["particles/all/position/value"][0:3], rtol=1e-6)
    finally:
        src.close()


@pytest.mark.parametrize("request_", ["atoms", "field", "range"])
def test_a_callers_bad_request_on_a_growing_file_is_refused_without_waiting(adk_vacuum_h5md, monkeypatch, request_):
    """Atoms past the end, a field the file lacks or frames past its end are the caller's mistake: no flush of
    the writer mends them, so the growing file refuses them at once instead of reopening it for seconds."""
    from trajscale.errors import TrajscaleError
    from trajscale.h5md import follow
    from trajscale.h5md.follow import GrowingH5MDSource

    src = GrowingH5MDSource(adk_vacuum_h5md)
    waits = []
    monkeypatch.setattr(follow.time, "sleep", waits.append)
    try:
        with pytest.raises(TrajscaleError, match={"atoms": "atom index", "field": "no velocity",
                                                  "range": "outside"}[request_]):
            if request_ == "atoms":
                src.read(0, 1, np.array([src.n_atoms]))
            elif request_ == "field":
                src.read(0, 1, fields=("position", "velocity"))
            else:
                src.read(0, src.n_frames + 1)
    finally:
        src.close()
    assert waits == []


def test_the_childrens_data_paths_are_mdanalysistests_own():
    """tests/datafiles.py (the paths the producers and MPI scripts use without importing MDAnalysis) names the
    files ``MDAnalysisTests.datafiles`` names."""
    from MDAnalysisTests import datafiles as D

    from tests import datafiles

    for name in ("PSF", "DCD", "TPR", "PSF_TRICLINIC"):
        assert getattr(datafiles, name) == getattr(D, name), name
