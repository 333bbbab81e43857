"""A user's files are safe: no command writes over one of its inputs (compared by device and inode, so
symlinks, hard links and other spellings count), an existing output is kept unless --overwrite, every
output is fsynced under a temporary name and renamed, and ``--resume`` can be given every time."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from tests.cli._helpers import assert_clean_failure
from tests.conftest import run_cli_here


def snapshot(folder: Path) -> dict:
    """Every entry under ``folder``: inode, size, mtime and content hash (a symlink by its target name)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            out[str(p)] = ("link", os.readlink(p))
        elif p.is_file():
            out[str(p)] = (st.st_ino, st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        else:
            out[str(p)] = ("dir",)
    return out


@pytest.fixture()
def files(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """Copies of a topology, an H5MD trajectory, a run report and a sample file; links to them."""
    import trajscale as ts

    shutil.copy(adk_vacuum[0], tmp_path / "top.psf")
    shutil.copy(adk_vacuum_h5md, tmp_path / "traj.h5md")
    os.symlink(tmp_path / "traj.h5md", tmp_path / "link.h5md")
    os.link(tmp_path / "traj.h5md", tmp_path / "hard.h5md")
    os.symlink("traj.h5md", tmp_path / "alias.h5")
    (tmp_path / "sub").mkdir()
    r = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md, stop=10, executor="serial")
    r.report.write(tmp_path / "r.json")
    os.symlink("r.json", tmp_path / "alias.png")
    np.savez(tmp_path / "s.npz", x=np.arange(12.0).reshape(4, 3))
    os.symlink("traj.h5md", tmp_path / "alias.json")
    (tmp_path / "split").mkdir()
    shutil.copy(adk_vacuum_h5md, tmp_path / "split" / "part_000.h5md")
    return tmp_path


#: (command line, the input it names as an output); run in the fixture's folder
INPUT_AS_OUTPUT = [
    (["run", "rmsd", "top.psf", "traj.h5md", "--select", "name CA", "--out", "traj.h5md"], "traj.h5md"),
    (["run", "rmsd", "top.psf", "traj.h5md", "--select", "name CA", "--out", "top.psf", "--overwrite"], "top.psf"),
    (["run", "rmsd", "top.psf", "traj.h5md", "--select", "name CA", "--out", "sub/../traj.h5md"], "traj.h5md"),
    (["run", "rmsd", "top.psf", "traj.h5md", "--select", "name CA", "--report", "hard.h5md", "--overwrite"],
     "traj.h5md"),
    (["run", "rgyr", "top.psf", "traj.h5md", "--select", "name CA", "--out", "alias.h5", "--overwrite"],
     "traj.h5md"),
    (["run", "rmsd", "top.psf", "link.h5md", "--select", "name CA", "--out", "hard.h5md", "--overwrite"],
     "link.h5md"),
    (["report", "r.json", "--trace", "r.json", "--overwrite"], "r.json"),
    (["report", "r.json", "--plot", "alias.png", "--overwrite"], "r.json"),
    (["convert", "top.psf", "traj.h5md", "-o", "traj.h5md", "--overwrite", "--no-progress"], "traj.h5md"),
    (["convert", "top.psf", "traj.h5md", "-o", "top.psf", "--overwrite", "--no-progress"], "top.psf"),
    (["rechunk", "traj.h5md", "-o", "link.h5md", "--overwrite", "--no-progress"], "traj.h5md"),
    (["split", "split/part_000.h5md", "-o", "split", "--parts", "2", "--overwrite"], "split/part_000.h5md"),
    (["index", "traj.h5md", "-o", "alias.json", "--overwrite"], "traj.h5md"),
    (["pack", "s.npz", "-o", "s.npz", "--overwrite", "--no-progress"], "s.npz"),
]


@pytest.mark.cli
@pytest.mark.parametrize("argv,target", INPUT_AS_OUTPUT, ids=[" ".join(a[:2]) + f" {i}"
                                                             for i, (a, _) in enumerate(INPUT_AS_OUTPUT)])
def test_no_command_writes_over_an_input(files, argv, target):
    before = snapshot(files)
    line = assert_clean_failure(run_cli_here(*argv, cwd=files), "is the input", target)
    assert line.count(":") >= 2   # names the output, then the input it is
    assert snapshot(files) == before   # nothing written, nothing replaced, no temporary left


@pytest.mark.cli
def test_run_keeps_an_existing_output_unless_overwrite(files):
    kept = files / "rmsd.csv"
    kept.write_text("my notes\n")
    assert_clean_failure(run_cli_here("run", "rmsd", "top.psf", "traj.h5md", "--select", "name CA", "--out",
                                 "rmsd.csv", cwd=files), "rmsd.csv", "already exists", "--overwrite")
    assert kept.read_text() == "my notes\n"
    proc = run_cli_here("run", "rmsd", "top.psf", "traj.h5md", "--select", "name CA", "--out", "rmsd.csv",
                   "--overwrite", cwd=files)
    assert proc.returncode == 0, proc.stderr
    assert np.loadtxt(kept, delimiter=",", skiprows=1).shape == (98, 3)


@pytest.mark.cli
def test_two_outputs_of_one_name_are_refused(files):
    before = snapshot(files)
    assert_clean_failure(run_cli_here("run", "rmsd", "top.psf", "traj.h5md", "--select", "name CA", "--out", "x.csv",
                                 "--report", "./x.csv", cwd=files), "x.csv", "twice")
    assert snapshot(files) == before


@pytest.mark.cli
def test_report_index_split_keep_existing_outputs_unless_overwrite(files):
    trace = files / "t.json"
    trace.write_text("keep")
    assert_clean_failure(run_cli_here("report", "r.json", "--trace", "t.json", cwd=files), "t.json", "already exists")
    assert trace.read_text() == "keep"
    ok = run_cli_here("report", "r.json", "--trace", "t.json", "--overwrite", cwd=files)
    assert ok.returncode == 0, ok.stderr
    assert trace.read_text().startswith(("{", "["))

    index = files / "i.json"
    index.write_text("keep")
    assert_clean_failure(run_cli_here("index", "traj.h5md", "-o", "i.json", cwd=files), "i.json", "already exists")
    assert index.read_text() == "keep"
    ok = run_cli_here("index", "traj.h5md", "-o", "i.json", "--overwrite", cwd=files)
    assert ok.returncode == 0, ok.stderr

    (files / "out").mkdir()
    stray = files / "out" / "part_001.h5md"
    stray.write_text("someone's file")
    assert_clean_failure(run_cli_here("split", "traj.h5md", "-o", "out", "--parts", "2", cwd=files), "part_001.h5md",
                         "already exists")
    assert stray.read_text() == "someone's file" and sorted(os.listdir(files / "out")) == ["part_001.h5md"]


def test_repair_copy_is_fsynced_before_and_after_its_rename(tmp_path, monkeypatch):
    """A contiguous file cannot shrink in place: its truncated copy is fsynced, renamed, and its folder fsynced."""
    from tests.pwrite.frames import adk_frames
    from tests.pwrite.test_repair import interrupted
    from trajscale.pwrite import repair

    out = tmp_path / "cut.h5md"
    interrupted(out, "contiguous", adk_frames(5))
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(a, b):
        events.append(("replace", str(a), str(b)))
        return real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    assert repair(out).method == "copy"
    (_, tmp, final), = [e for e in events if e[0] == "replace"]
    assert final == str(out) and Path(tmp).parent == tmp_path
    i = events.index(("replace", tmp, final))
    assert ("fsync", tmp) in events[:i] and ("fsync", str(tmp_path)) in events[i + 1:]


# ---------------------------------------------------------------- --resume every time


@pytest.mark.cli
def test_convert_and_rechunk_resume_every_time(tmp_path, adk_vacuum):
    """A SLURM requeue script gives --resume on every start: nothing to resume starts the work (and says
    so); a complete output is said to be complete, exit 0, and is not rewritten."""
    psf, dcd = adk_vacuum
    out = tmp_path / "adk.h5md"
    first = run_cli_here("convert", psf, dcd, "-o", str(out), "--resume", "--no-progress")
    assert first.returncode == 0, first.stderr
    assert "nothing to resume" in first.stderr and "starting" in first.stderr
    u, ref = mda.Universe(psf, str(out)), mda.Universe(psf, dcd)
    assert u.trajectory.n_frames == ref.trajectory.n_frames == 98
    np.testing.assert_allclose(u.trajectory[97].positions, ref.trajectory[97].positions, atol=1e-5)
    st = out.stat()
    again = run_cli_here("convert", psf, dcd, "-o", str(out), "--resume", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "is complete" in again.stderr
    assert (out.stat().st_ino, out.stat().st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert sorted(os.listdir(tmp_path)) == ["adk.h5md"]

    re = tmp_path / "re.h5md"
    first = run_cli_here("rechunk", str(out), "-o", str(re), "--chunks", "frame", "--resume", "--no-progress")
    assert first.returncode == 0, first.stderr
    assert "nothing to resume" in first.stderr
    with h5py.File(out) as a, h5py.File(re) as b:
        np.testing.assert_array_equal(a["particles/all/position/value"][()], b["particles/all/position/value"][()])
        assert b["particles/all/position/value"].chunks[0] == 1
    st = re.stat()
    again = run_cli_here("rechunk", str(out), "-o", str(re), "--chunks", "frame", "--resume", "--no-progress")
    assert again.returncode == 0 and "is complete" in again.stderr, again.stderr
    assert (re.stat().st_ino, re.stat().st_mtime_ns) == (st.st_ino, st.st_mtime_ns)


@pytest.mark.cli
def test_pack_resume_on_a_complete_store(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.ones((3, 2)))
    assert run_cli_here("pack", "a.npz", "-o", "s.h5", "--no-progress", cwd=tmp_path).returncode == 0
    st = (tmp_path / "s.h5").stat()
    again = run_cli_here("pack", "a.npz", "-o", "s.h5", "--resume", "--no-progress", cwd=tmp_path)
    assert again.returncode == 0 and "is complete" in again.stderr, again.stderr
    assert ((tmp_path / "s.h5").stat().st_mtime_ns, (tmp_path / "s.h5").stat().st_ino) == (st.st_mtime_ns,
                                                                                          st.st_ino)


@pytest.mark.cli
def test_resume_never_takes_an_input_for_a_complete_output(tmp_path, adk_vacuum_h5md):
    shutil.copy(adk_vacuum_h5md, tmp_path / "t.h5md")
    before = snapshot(tmp_path)
    assert_clean_failure(run_cli_here("rechunk", "t.h5md", "-o", "t.h5md", "--resume", cwd=tmp_path), "is the input")
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- --precision without compression


def _precision_warnings(proc) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return [ln for ln in proc.stderr.splitlines() if "only loses precision" in ln]


@pytest.mark.cli
def test_precision_without_compression_warns_once(tmp_path, adk_vacuum, adk_vacuum_h5md):
    psf, dcd = adk_vacuum
    lines = _precision_warnings(run_cli_here("convert", psf, dcd, "-o", str(tmp_path / "a.h5md"), "--precision", "0.01",
                                        "--no-progress"))
    assert len(lines) == 1 and "--compression" in lines[0], lines
    assert _precision_warnings(run_cli_here("-q", "convert", psf, dcd, "-o", str(tmp_path / "b.h5md"), "--precision",
                                       "0.01")) == []
    assert _precision_warnings(run_cli_here("convert", psf, dcd, "-o", str(tmp_path / "c.h5md"), "--precision", "0.01",
                                       "--compression", "gzip", "--no-progress")) == []
    assert len(_precision_warnings(run_cli_here("rechunk", adk_vacuum_h5md, "-o", str(tmp_path / "d.h5md"),
                                           "--precision", "0.01", "--no-progress"))) == 1


def test_virtual_output_never_replaces_the_segments_an_input_maps(tmp_path, adk_vacuum_h5md):
    """``--virtual`` replaces NAME.parts/ (with --overwrite): not when an input maps those segments
    (a.h5md rewritten as a.hdf5 shares a.parts/) or lies in that folder."""
    from trajscale.convert.rechunk import rechunk
    from trajscale.errors import OutputError
    from trajscale.h5md.layout import Layout

    a = tmp_path / "a.h5md"
    rechunk(adk_vacuum_h5md, a, Layout.parse("7", "gzip:1"), executor="processes", n_workers=2, virtual=True)
    assert (tmp_path / "a.parts").is_dir()
    before = snapshot(tmp_path)
    with pytest.raises(OutputError, match="is the input"):
        rechunk(a, tmp_path / "a.hdf5", Layout.parse("7", "gzip:1"), executor="processes", n_workers=2,
                virtual=True, overwrite=True)
    assert snapshot(tmp_path) == before
    with h5py.File(a) as f, h5py.File(adk_vacuum_h5md) as g:   # the virtual file still reads whole
        np.testing.assert_array_equal(f["particles/all/position/value"][()], g["particles/all/position/value"][()])
