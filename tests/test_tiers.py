"""The suite's tiers are enforced: a test that starts mpiexec, or another process, without its marker fails, and
so does an unmarked test that computes past the time limit (tests/tiers.py)."""

from __future__ import annotations

import pytest

from tests import tiers
from tests.conftest import ROOT, mpiexec

INNER = """
import subprocess
import sys

import pytest

MPIEXEC = {mpiexec!r}


# mpiexec's exit status is not what these test (on a loaded machine MPICH's launcher has died of SIGPIPE
# when ``true`` ended before it had written to it): the markers are checked from the launch itself.
def test_unmarked_mpiexec():
    subprocess.run([MPIEXEC, "-n", "1", "true"])


@pytest.mark.mpi
def test_marked_mpiexec():
    subprocess.run([MPIEXEC, "-n", "1", "true"])


def test_unmarked_python():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.cli
def test_marked_python():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_in_process():
    assert sum(range(10)) == 45
"""


@pytest.mark.cli
@pytest.mark.mpi
def test_unmarked_process_starts_fail_with_the_marker_named(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("TRAJSCALE_TIERS_RECORD", raising=False)
    pytester.makeconftest("pytest_plugins = ['tests.tiers']\n")
    pytester.makepyfile(test_inner=INNER.format(mpiexec=mpiexec()))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-W",
                                           "ignore::pytest.PytestUnknownMarkWarning", timeout=300)
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines([
        "*_ test_unmarked_mpiexec _*",
        "starts mpiexec* (*mpiexec* -n 1 true) but is not marked `mpi`: add @pytest.mark.mpi*",
        "*_ test_unmarked_python _*",
        "starts a process (*python* -c pass) but is not marked `cli`: add @pytest.mark.cli*",
    ])


def test_time_limit_counts_the_smaller_of_wall_and_cpu_time():
    # 8 s of wall time while another load holds the CPU, 2 s of CPU: an idle machine would take about 2 s
    assert tiers.problems(set(), [], min(8.0, 2.0)) == []
    over = tiers.problems(set(), [], 7.0)
    assert len(over) == 1 and "not marked `slow`" in over[0]
    for mark in ("slow", "mpi", "cli", "tool"):
        assert tiers.problems({mark}, [], 7.0) == []


def test_a_launcher_needs_mpi_even_under_cli():
    started = [["/usr/bin/mpiexec.mpich", "-n", "2", "python", "x.py"]]
    assert "`mpi`" in tiers.problems({"cli"}, started, 0.1)[0]
    assert tiers.problems({"mpi"}, started, 0.1) == []
    assert tiers.problems({"tool"}, [["/usr/bin/git", "status"]], 0.1) == []
