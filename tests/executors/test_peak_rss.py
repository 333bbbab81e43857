"""Memory is bounded by the block budget, not by the number of frames (kernel-measured peak RSS)."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import shared_demo_file
from tests.support.peak_rss import peak_rss

pytestmark = [pytest.mark.cli, pytest.mark.slow]   # its module fixture writes a 2,000-frame file

MB = 1024**2
SELECT = "name CA or index 47680"   # CA atoms at the start of the frame, one atom at its very end


@pytest.fixture(scope="module")
def adk_2000(tmp_path_factory):
    """2,000 frames of AdK in water (47,681 atoms, 1.1 GB): copies of MDAnalysisTests' XTC."""
    return shared_demo_file(tmp_path_factory, 2000)


def _peak(files, stop: int, *args: str, analysis: str = "rmsd") -> int:
    tpr, h5 = files
    cmd = [sys.executable, "-m", "trajscale.cli.main", "run", analysis, tpr, h5, "--no-progress",
           "--stop", str(stop), *args]
    peak, done = peak_rss(cmd)
    assert done.returncode == 0, done.stderr
    assert f"{stop} frames" in done.stdout
    return peak


@pytest.mark.parametrize("executor", [["--executor", "serial"], ["--executor", "processes", "-n", "2", "--tasks", "2"]],
                         ids=["serial", "processes"])
def test_peak_rss_does_not_grow_with_frames(adk_2000, executor):
    """A scattered selection, default block budget: 2,000 frames cost < 150 MB more than 500."""
    small = _peak(adk_2000, 500, "--select", SELECT, *executor)
    large = _peak(adk_2000, 2000, "--select", SELECT, *executor)
    assert large - small < 150 * MB, (small / MB, large / MB)


def test_peak_rss_of_whole_frames_is_bounded_by_the_block_budget(adk_2000):
    """Every atom (1.1 GB of frames), read in blocks of 64 MB: the run stays within a few blocks."""
    small = _peak(adk_2000, 500, "--select", "all", "--max-block-mb", "64")
    large = _peak(adk_2000, 2000, "--select", "all", "--max-block-mb", "64")
    assert large - small < 150 * MB, (small / MB, large / MB)


@pytest.mark.parametrize("executor", [["--executor", "serial"], ["--executor", "processes", "-n", "2"]],
                         ids=["serial", "processes"])
def test_peak_rss_does_not_grow_with_tasks(adk_2000, executor):
    """An accumulating analysis (all-atom RMSF: sums over 47,681 atoms, 3 MB a partial) in as many tasks
    as the file's 3-frame chunks allow (67) holds a few partials at a time, as in 4 (it held them all:
    +250 MB): each is folded in as it comes home."""
    few = _peak(adk_2000, 200, "--select", "all", *executor, "--tasks", "4", analysis="rmsf")
    many = _peak(adk_2000, 200, "--select", "all", *executor, "--tasks", "200", analysis="rmsf")
    assert many - few < 150 * MB, (few / MB, many / MB)
