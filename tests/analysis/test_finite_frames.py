"""The per-frame finiteness check behind NaN/inf detection, against NumPy's element-wise answer."""

from __future__ import annotations

import numpy as np

from trajscale.block import finite_frames


def test_matches_elementwise_check_including_sums_that_overflow():
    rng = np.random.default_rng(1)
    x = (rng.random((7, 50, 3)) * 100).astype(np.float32)
    x[1, 3, 2] = np.nan
    x[2, 0, 0] = np.inf
    x[3, 1, 1], x[3, 2, 1] = np.inf, -np.inf
    x[4] = 3e38                      # finite values whose float32 sum overflows
    x[5, 49, 0] = -np.inf
    np.testing.assert_array_equal(finite_frames(x), np.isfinite(x).all(axis=(1, 2)))
    assert finite_frames(x).tolist() == [True, False, False, False, True, False, True]
