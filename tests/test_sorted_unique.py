"""``block.sorted_unique`` is ``np.unique`` (the values, dtype and order NumPy gives), without its first call's
import of ``numpy.ma``."""

from __future__ import annotations

import numpy as np
import pytest

from trajscale.block import sorted_unique


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint16, np.intp, bool, np.float64, np.float32])
def test_the_values_numpy_gives(dtype):
    rng = np.random.default_rng(7)
    for shape in [(0,), (1,), (50,), (7, 9), (3, 4, 5)]:
        values = rng.integers(0, 12, size=shape).astype(dtype)
        if values.dtype.kind == "f" and values.size:
            values.flat[::3] = np.nan   # NumPy's own: its NaNs compare equal
        got, ref = sorted_unique(values), np.unique(values)
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


def test_a_list_and_a_scalar_too():
    np.testing.assert_array_equal(sorted_unique([5, 1, 5, 3]), np.unique([5, 1, 5, 3]))
    np.testing.assert_array_equal(sorted_unique(4), np.unique(4))
