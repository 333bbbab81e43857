"""``benchmarks/remote.py --pairs``: two rows timed as whole processes in turn, at the smoke size."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.remote, pytest.mark.tool, pytest.mark.cli, pytest.mark.slow]


def test_pairs_time_two_rows_in_turn_and_give_the_medians(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "remote.py"), "--smoke", "--workdir",
                           str(tmp_path), "--pairs", "rmsd-serial-default-url:rmsd-serial-default-local",
                           "--repeat", "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    num = r"[\d.]+"
    assert re.search(rf"^A rmsd-serial-default-url  B rmsd-serial-default-local: A {num} s, B {num} s, "
                     rf"A/B {num} \(pairs: {num} {num}; load {num} -> {num}\)$", proc.stdout, re.M), proc.stdout
    got = json.loads((tmp_path / "pairs.json").read_text())
    assert len(got) == 1 and len(got[0]["ratios"]) == 2
    assert got[0]["ratio"] == pytest.approx(sorted(got[0]["ratios"])[0] / 2 + sorted(got[0]["ratios"])[1] / 2)
    assert (tmp_path / "commands" / "rmsd-serial-default-url.csv").read_bytes() == \
        (tmp_path / "commands" / "rmsd-serial-default-local.csv").read_bytes()
