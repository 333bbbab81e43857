"""Smoke runs of the features, ensemble, scale and kernel benchmarks (tests/benchmarks/smoke.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .smoke import MODULES, smoke

pytestmark = pytest.mark.tool   # runs the benchmarks at their smallest size


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.parametrize("script", MODULES[Path(__file__).stem])
def test_smoke(script, work):
    smoke(script, work)
