"""Outputs checked before the work, and a result saved somewhere it says when its folder fails at the end.

Real file systems: a read-only tmpfs (root ignores folder permissions, not a read-only mount) and a
small tmpfs that fills up (ENOSPC); skipped where this process cannot mount.
"""

from __future__ import annotations

import os
import subprocess

import h5py
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import run_cli
from trajscale.errors import OutputError

pytestmark = pytest.mark.cli


def _mount(folder, opts: str):
    folder.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(folder)], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): needs root outside a restricted container")


@pytest.fixture
def mounts(tmp_path):
    made = []

    def mount(name: str, opts: str):
        folder = tmp_path / name
        _mount(folder, opts)
        made.append(folder)
        return folder
    yield mount
    for folder in made:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _one_line(r, *words):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], r.stderr


def test_unwritable_outputs_are_refused_before_any_frame_is_read(mounts):
    ro = mounts("ro", "ro,size=1m")
    env = dict(os.environ, TRAJSCALE_TEST_SLOW_READ="60")   # a run that read a block would outlast the timeout
    r = run_cli("run", "rmsd", D.GRO, D.XTC, "--select", "name CA", "--out", str(ro / "r.csv"), env=env,
                timeout=50)
    _one_line(r, str(ro / "r.csv"), "cannot create files in", "Read-only file system")
    r = run_cli("run", "rmsd", D.GRO, D.XTC, "--select", "name CA", "--report", str(ro / "r.json"), env=env,
                timeout=50)
    _one_line(r, str(ro / "r.json"), "Read-only file system")
    r = run_cli("convert", D.GRO, D.XTC, "-o", str(ro / "x.h5md"), "--no-progress")
    _one_line(r, str(ro / "x.h5md"), "Read-only file system")


def test_convert_needing_more_than_the_free_space_is_refused_before_the_work(mounts):
    small = mounts("small", "size=2m")
    r = run_cli("convert", D.GRO, D.XTC, "-o", str(small / "x.h5md"), "--no-progress")
    _one_line(r, str(small / "x.h5md"), "needs about 5", "free")   # 10 x 47,681 x 12 bytes = 5.7 MB
    assert os.listdir(small) == []


def test_a_result_its_full_folder_cannot_take_is_saved_in_tmpdir(mounts, tmp_path, monkeypatch):
    """ENOSPC while the finished result is written: nothing under the final name, the result in $TMPDIR."""
    from trajscale.analysis.results import save_as

    small = mounts("small", "size=64k")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "spare"))
    (tmp_path / "spare").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    values = np.random.default_rng(0).random((200, 100))   # 160 kB: more than the folder holds
    with pytest.raises(OutputError) as err:
        save_as(small / "r.h5", ".h5", arrays={"values": values})
    msg = str(err.value)
    assert "No space left on device" in msg and "saved as" in msg, msg
    saved = msg.rsplit("saved as ", 1)[1]
    assert saved.startswith(str(tmp_path / "spare"))
    with h5py.File(saved) as f:
        np.testing.assert_array_equal(f["values"][()], values)
    assert os.listdir(small) == []   # no temporary, nothing under the final name


@pytest.mark.xfail(reason="the message and the kept partial are right, but HDF5 then crashes (SIGSEGV in "
                          "H5F__close_cb) closing the file whose write failed, at interpreter exit", strict=False)
def test_convert_filling_the_disk_midway_keeps_a_resumable_partial(mounts):
    """gzip output (size unknown in advance) on a 3 MB tmpfs: ENOSPC midway is one line, nothing under
    the final name, the partial and its record kept for --resume."""
    small = mounts("small", "size=3m")
    out = small / "x.h5md"
    r = run_cli("convert", D.GRO, D.TRR, "-o", str(out), "--compression", "gzip:1", "--chunks", "1",
                "--no-progress")
    _one_line(r, str(out), "no space left", "--resume")
    assert not out.exists()
    assert (small / ".x.h5md.convert-partial").exists() and (small / ".x.h5md.convert-progress.json").exists()


def test_mda_writer_to_a_read_only_folder_says_so(mounts):
    import MDAnalysis as mda

    import trajscale.mda

    ro = mounts("ro", "ro,size=1m")
    u = mda.Universe(D.GRO, D.XTC)
    with pytest.raises(Exception) as err, trajscale.mda.Writer(str(ro / "w.h5md"), n_atoms=u.atoms.n_atoms) as w:
        w.write(u.atoms)
    assert "truncated" not in str(err.value) and "Read-only file system" in str(err.value), str(err.value)


def test_rechunk_split_and_report_plot_refuse_a_read_only_folder_first(mounts, tmp_path):
    from trajscale.convert.convert import convert

    src = tmp_path / "in.h5md"
    convert(D.GRO, [D.XTC], str(src), select="name CA")
    report = tmp_path / "r.json"
    r = run_cli("run", "rmsd", D.GRO, D.XTC, "--select", "name CA", "--report", str(report))
    assert r.returncode == 0, r.stderr
    ro = mounts("ro", "ro,size=1m")
    _one_line(run_cli("rechunk", str(src), "-o", str(ro / "re.h5md"), "--no-progress"), str(ro / "re.h5md"),
              "Read-only file system")
    _one_line(run_cli("split", str(src), "-o", str(ro / "parts"), "--parts", "2"), "Read-only file system")
    _one_line(run_cli("report", str(report), "--plot", str(ro / "r.png")), str(ro / "r.png"),
              "Read-only file system")
