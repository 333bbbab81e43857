"""Smoke runs of the benchmarks against MDAnalysis on the demo file (tests/benchmarks/smoke.py)."""

from __future__ import annotations

import pytest

from .smoke import smoke_test

pytestmark = pytest.mark.tool   # runs the benchmarks at their smallest size

test_smoke = smoke_test(__file__)
