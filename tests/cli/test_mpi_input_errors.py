"""A missing or bad input under ``mpiexec -n 2``: every rank ends, non-zero, with one line naming the input.

Rank 0 alone checks some inputs (the probe's folder, a run's trajectory) while the other ranks wait for
what it prepares: its error must reach them (rank 0 prepares, then shares), or they wait until the job is
cancelled.  Real mpiexec, a bounded wait: a hang fails the test at the timeout."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import run_mpi

pytestmark = [pytest.mark.mpi, pytest.mark.cli]

#: mpiexec's ranks start and meet in a few seconds; a rank left waiting would wait for ever.
TIMEOUT = 120


def _ends_with_one_error(args: list[str], path: str, needle: str) -> None:
    try:
        proc = run_mpi(2, ["-m", "trajscale.cli.main", *args], timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"trajscale {' '.join(args)} under mpiexec -n 2: a rank still waited after {TIMEOUT} s")
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "TPRparser" not in line]
    assert lines, proc.stderr
    assert len(set(lines)) == 1, proc.stderr   # once, or every rank the same line; nothing else
    assert lines[0].startswith(f"trajscale {args[0]}: error: {path}") and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "BAD TERMINATION" not in proc.stdout + proc.stderr


def test_probe_missing_folder(tmp_path):
    missing = str(tmp_path / "missing")
    _ends_with_one_error(["probe", missing, "--seconds", "1"], missing, "no such file or folder")


def test_probe_file_too_small(tmp_path):
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 1000)
    _ends_with_one_error(["probe", str(small), "--seconds", "1"], str(small), "too small to probe")


def test_mpi_run_bad_trajectory(tmp_path, adk_vacuum):
    bad = tmp_path / "bad.xtc"
    bad.write_bytes(b"not an xtc\n" * 10)
    _ends_with_one_error(["run", "rmsd", adk_vacuum[0], str(bad), "--executor", "mpi", "--no-progress",
                          "--out", str(tmp_path / "r.csv")], str(bad), "XTC")
    assert not (tmp_path / "r.csv").exists()


def test_convert_and_rechunk_missing_input(tmp_path, adk_vacuum):
    missing = str(tmp_path / "missing.xtc")
    _ends_with_one_error(["convert", adk_vacuum[0], missing, "-o", str(tmp_path / "o.h5md"), "--no-progress"],
                         missing, "no such file")
    missing = str(tmp_path / "missing.h5md")
    _ends_with_one_error(["rechunk", missing, "-o", str(tmp_path / "r.h5md"), "--no-progress"],
                         missing, "no such file")
    assert not (tmp_path / "o.h5md").exists() and not (tmp_path / "r.h5md").exists()
