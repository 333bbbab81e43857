"""The code passes ruff with the rules pyproject.toml selects (pycodestyle, pyflakes, bugbear,
blind excepts, import order)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.cli
def test_ruff_is_clean():
    paths = ["src", "tests", "benchmarks", "scripts"]
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *paths],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "No module named ruff" not in proc.stderr, "ruff is in the test extra: pip install -e '.[test]'"
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_selects_the_rules():
    """A ruff without rules checks nothing: the selection is part of what this test keeps."""
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert {"E", "F", "B", "BLE", "I"} <= set(conf["select"])
