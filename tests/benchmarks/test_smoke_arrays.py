"""Smoke runs of the lazy-array, codec, follower and ML-loading benchmarks (tests/benchmarks/smoke.py)."""

from __future__ import annotations

import re

import pytest

from .smoke import CODEC_ROWS, NUM, smoke_output, smoke_test

pytestmark = pytest.mark.tool   # runs the benchmarks at their smallest size

test_smoke = smoke_test(__file__)


@pytest.mark.cli
def test_codec_study_u16_rows_run_without_numba(work):
    """codecs.py's uint16-delta study rows (decoded by numba until issue 23) run where numba is absent, and
    decode both trajectories to within half the 0.01 Å quantum of MDAnalysis's values (the rows of codecs.py's
    smoke run, which runs them beside today's encoding)."""
    out = smoke_output("codecs.py", work)
    for row in CODEC_ROWS[1:]:
        m = re.search(rf"^{re.escape(row)}((?:\s+{NUM}){{12}})$", out, re.MULTILINE)
        assert m, f"no row {row!r}:\n{out[-3000:]}"
        values = [float(v) for v in m.group(1).split()]
        assert values[5] <= 0.0051 and values[11] <= 0.0051, m.group(0)   # err columns, Å

