"""The demo's headline compares whole processes, cold on both sides, and says which figures are warm."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import shared_demo_file
from trajscale.demo import run_demo

pytestmark = [pytest.mark.cli, pytest.mark.slow]

NUM = r"[\d.]+"


def test_demo_compares_whole_processes(tmp_path, tmp_path_factory, capsys):
    # the run's whole-protein XTC in its folder: the demo converts its file from it (the protein is not
    # made whole again: about 4 s of CPU)
    whole = Path(shared_demo_file(tmp_path_factory, 20)[1]).with_name("adk_whole.xtc")
    (tmp_path / "adk_whole.xtc").symlink_to(whole)
    assert run_demo(str(tmp_path), n_frames=20, n_workers=2, executor="processes") == 0
    assert (tmp_path / "adk_20.h5md").is_file()   # its own file, built here
    out = capsys.readouterr().out
    assert "whole processes timed from outside, cold on both sides" in out, out
    header = r"^run \(whole process\)\s+trajscale s\s+MDAnalysis s\s+ratio\s+range\s+cpu ratio$"
    assert re.search(header, out, re.MULTILINE), out
    rows = re.findall(rf"^(trajscale .+?)\s+({NUM})\s+({NUM})\s+({NUM})x\s+{NUM}-{NUM}\s+{NUM}x$", out,
                      re.MULTILINE)
    assert [r[0] for r in rows] == ["trajscale serial, first run after install (empty caches)", "trajscale serial",
                                    "trajscale processes(2) vs multiprocessing(2)"], out
    for _, t_ts, t_mda, ratio in rows:   # one pair per row: the ratio is MDAnalysis's time over trajscale's
        # the times are printed to 0.01 s: the ratio of the unrounded times lies within their rounding
        ts_, mda_ = float(t_ts), float(t_mda)
        lo, hi = (mda_ - 0.005) / (ts_ + 0.005), (mda_ + 0.005) / max(ts_ - 0.005, 1e-9)
        # (+ the ratio's own rounding, 0.005, and 0.0001 for a half-way case's binary rounding)
        assert lo - 0.0051 <= float(ratio) <= hi + 0.0051, (ratio, t_ts, t_mda)
    diff = re.search(r"^max \|RMSD difference\| ([\d.e+-]+) A$", out, re.MULTILINE)
    assert diff and float(diff.group(1)) < 1e-4, out
    # The in-process run's time is labelled warm, not shown as a whole-process figure.
    warm = r"ran inside this process, .*a warm figure, not a whole process\.\n.*\n\s+[\d.]+ s total"
    assert re.search(warm, out), out
    # ...and timed from its own call: the data building and the comparison above are not its start-up
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["process"]["origin"] == "run start", report["process"]
    assert "from the run's start" in out, out
    csv = np.genfromtxt(tmp_path / "rmsd.csv", delimiter=",", names=True)
    assert len(csv) == 20 and (tmp_path / "report.json").exists()
    assert not list(tmp_path.glob("whole-runs-*"))   # the comparison's scratch folder is removed

