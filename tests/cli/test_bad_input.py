"""Bad input: one line naming the file and the problem, exit != 0, no traceback, no output left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from tests.cli._helpers import assert_clean_failure
from tests.conftest import run_cli, run_cli_here

pytestmark = pytest.mark.cli


@pytest.fixture()
def bad_files(tmp_path, adk_vacuum_h5md):
    trunc = tmp_path / "truncated.h5md"
    trunc.write_bytes(open(adk_vacuum_h5md, "rb").read()[:20000])
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["data"] = np.arange(10)
    nopos = tmp_path / "nopos.h5md"
    with h5py.File(nopos, "w") as f:
        f.create_group("h5md")
        f.create_group("particles/all/velocity")
    unknown = tmp_path / "notes.bin"   # no format's bytes, no format's name: the formats read are listed
    unknown.write_bytes(b"these are not coordinates\n" * 10)
    return {"truncated": trunc, "plain": plain, "nopos": nopos, "dir": tmp_path, "unknown": unknown}


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("case,needle", [
    ("missing", "no such file"), ("dir", "directory"), ("truncated", "truncated.h5md"),
    ("plain", "not an H5MD file"), ("nopos", "position"),
    ("unknown", None)])
def test_bad_trajectory(tmp_path, adk_vacuum, bad_files, case, needle):
    if needle is None:   # the formats read, as the registry lists them (a format added is listed too)
        from trajscale.sources.registry import supported

        needle = f"not a trajectory format trajscale reads (it reads {supported()})"
        assert "H5MD" in needle and "XTC, TRR" in needle   # the registry's list holds trajscale's own formats
    path = tmp_path / "missing.h5md" if case == "missing" else bad_files[case]
    out = tmp_path / "out.h5md"
    # the message is main's to print: one case in a process of its own (what a process prints as it exits, a
    # reader's __del__ included, is in its stderr), the others in this one
    cli = run_cli if case == "truncated" else run_cli_here
    for args in (["convert", adk_vacuum[0], str(path), "-o", str(out), "--no-progress"],
                 ["run", "rmsd", adk_vacuum[0], str(path), "--no-progress"],
                 ["inspect", str(path)]):
        assert_clean_failure(cli(*args), str(path) if case != "dir" else "", needle)
    assert not out.exists()


def test_unreadable_part_in_convert_prints_no_traceback(tmp_path, adk_water):
    """MDAnalysis's XTCReader fails again in __del__ after a failed open; the user sees one line."""
    bad = tmp_path / "bad.xtc"
    bad.write_bytes(np.random.default_rng(0).bytes(5000))
    proc = run_cli("convert", adk_water["gro"], adk_water["xtc"], str(bad), "-o", str(tmp_path / "o.h5md"))
    assert_clean_failure(proc, str(bad))


def test_atom_count_mismatch(tmp_path, adk_vacuum, adk_water, adk_vacuum_h5md):
    out = tmp_path / "out.h5md"
    assert_clean_failure(run_cli_here("convert", adk_water["gro"], adk_vacuum[1], "-o", str(out)), "atoms")
    assert_clean_failure(run_cli_here("run", "rmsd", adk_water["gro"], adk_vacuum_h5md), "atoms")
    assert not out.exists()


def test_selection_errors(tmp_path, adk_vacuum, adk_vacuum_h5md):
    out = tmp_path / "out.h5md"
    assert_clean_failure(run_cli_here("convert", *adk_vacuum, "-o", str(out), "--select", "resname NOPE"),
                         "selects no atoms")
    assert_clean_failure(run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--select",
                                      "name CA and ((("), "invalid selection")
    assert_clean_failure(run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--ref-frame", "500"),
                         "reference frame 500")
    assert not out.exists()


def test_output_problems(tmp_path, adk_vacuum):
    assert_clean_failure(run_cli_here("convert", *adk_vacuum, "-o", str(tmp_path / "nodir" / "x.h5md")),
                         "does not exist")
    existing = tmp_path / "exists.h5md"
    existing.write_text("keep me")
    assert_clean_failure(run_cli_here("convert", *adk_vacuum, "-o", str(existing)), "already exists")
    assert existing.read_text() == "keep me"
    ok = run_cli_here("convert", *adk_vacuum, "-o", str(existing), "--overwrite", "--no-progress")
    assert ok.returncode == 0, ok.stderr
    assert h5py.is_hdf5(existing)


def test_nan_coordinates(tmp_path, adk_vacuum, adk_vacuum_h5md):
    bad = tmp_path / "nan.h5md"
    bad.write_bytes(open(adk_vacuum_h5md, "rb").read())
    with h5py.File(bad, "r+") as f:
        f["particles/all/position/value"][37, 10, 0] = np.nan
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], str(bad), "--select", "all", "--no-progress")
    assert_clean_failure(proc, "frame 37", "nan.h5md")
    csv = tmp_path / "r.csv"
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], str(bad), "--select", "all", "--allow-nan", "--out", str(csv))
    assert proc.returncode == 0, proc.stderr
    rmsd = np.loadtxt(csv, delimiter=",", skiprows=1)[:, 2]
    assert np.isnan(rmsd[37]) and np.isfinite(np.delete(rmsd, 37)).all()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_convert_keeps_only_its_partial_for_resume(tmp_path, adk_water, sig):
    """Nothing under the final name; the partial output and its record stay (hidden) for --resume."""
    out = tmp_path / "big.h5md"
    cmd = [sys.executable, "-m", "trajscale.cli.main", "convert", adk_water["tpr"], *[adk_water["xtc"]] * 150,
           "-o", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial = tmp_path / ".big.h5md.convert-partial"
    deadline = time.time() + 180   # the interpreter, MDAnalysis and the TPR first: tens of seconds on a busy machine
    while time.time() < deadline and not partial.exists():
        time.sleep(0.05)
    time.sleep(0.5)
    # The test means something only if the signal lands mid-write: the convert is still
    # running and its temporary file exists at that moment.
    assert proc.poll() is None, f"convert ended before the signal: {proc.communicate()[1][-2000:]}"
    assert partial.exists(), "no temporary file when signalled"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in err, err
    assert ".tmp" not in err and "partial" not in err, err   # issue 17: no name the user never heard of
    assert "--resume" in err and str(out) in err, err
    assert sorted(os.listdir(tmp_path)) == [".big.h5md.convert-partial", ".big.h5md.convert-progress.json"]
