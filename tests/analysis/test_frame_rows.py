"""FrameRows: the declared partial of a per-frame analysis, and a user's own analysis that returns a plain dict."""

from __future__ import annotations

from dataclasses import dataclass

import MDAnalysis as mda
import numpy as np
import pytest

import trajscale as ts
from trajscale.analysis import ANALYSES
from trajscale.analysis.base import Analysis, FrameRows, Prepared
from trajscale.errors import ConfigError


@dataclass(frozen=True)
class MeanXResult:
    rows: FrameRows
    report: object = None


class MeanX(Analysis):
    """A user's own per-frame analysis written before FrameRows: ``map`` returns a dict with frame and time."""

    name = "test_mean_x"

    def __init__(self, as_record: bool = False) -> None:
        self.as_record = as_record

    def get_config(self) -> dict:
        return {"name": self.name, "as_record": self.as_record}

    def prepare(self, universe, source) -> Prepared:
        return Prepared(atoms=universe.atoms.indices)

    def map(self, block, prep):
        x = block.positions[..., 0].astype(np.float64).mean(axis=1)
        if self.as_record:
            return FrameRows(block.frames, block.time, {"x": x})
        return {"frame": block.frames, "time": block.time, "x": x}

    def result(self, reduced: FrameRows, prep) -> MeanXResult:
        return MeanXResult(reduced)


@pytest.fixture
def registered():
    ANALYSES[MeanX.name] = MeanX
    yield
    del ANALYSES[MeanX.name]


@pytest.mark.parametrize("as_record", [False, True])
def test_a_plain_dict_partial_reduces_like_the_record(registered, adk_vacuum, adk_vacuum_h5md, as_record):
    """Many tasks of one 5-frame block each: the rows come back in frame order, equal to MDAnalysis's frames."""
    u = mda.Universe(*adk_vacuum)
    want = np.array([ts_.positions[:, 0].astype(np.float64).mean() for ts_ in u.trajectory])
    r = ts.run(MeanX(as_record), adk_vacuum[0], adk_vacuum_h5md, n_tasks=7, max_block_bytes=5 * 3341 * 12)
    got = r.rows
    assert isinstance(got, FrameRows) and len(r.report.tasks) > 1   # many partials reduced
    np.testing.assert_array_equal(got.frame, np.arange(u.trajectory.n_frames))
    np.testing.assert_allclose(got.time, [ts_.time for ts_ in u.trajectory], rtol=1e-6)
    np.testing.assert_allclose(got.columns["x"], want, rtol=1e-6)


def test_partials_in_any_order_concatenate_in_frame_order():
    parts = [FrameRows(np.arange(a, b), np.arange(a, b) * 2.0, {"v": np.arange(a, b)[:, None] * [1.0, -1.0]})
             for a, b in ((6, 9), (0, 2), (2, 6))]
    rows = MeanX().reduce([parts[0], {}, parts[1].to_dict(), parts[2]])
    np.testing.assert_array_equal(rows.frame, np.arange(9))
    np.testing.assert_array_equal(rows.time, np.arange(9) * 2.0)
    np.testing.assert_array_equal(rows.columns["v"], np.arange(9)[:, None] * [1.0, -1.0])
    assert len(MeanX().reduce([])) == 0 and MeanX().reduce([]).frame.dtype == np.int64


def test_the_rule_is_checked_by_name():
    with pytest.raises(ConfigError, match="needs 'frame' and 'time'.*'x'"):
        FrameRows.of({"x": np.zeros(3)})
    with pytest.raises(ConfigError, match="one row per frame: 3 frames, but 'x' has 2 rows"):
        FrameRows(np.arange(3), np.zeros(3), {"x": np.zeros(2)})
