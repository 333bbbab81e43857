"""Fixed-point frame sums (kernels.sums): exact across splits, accurate against NumPy float64."""

from __future__ import annotations

import numpy as np
import pytest

from trajscale.errors import BadCoordinatesError
from trajscale.kernels.sums import exact_sum, frame_sums, mean_and_m2, shift_of, volume_of


@pytest.fixture
def coords():
    rng = np.random.default_rng(7)
    base = rng.uniform(-60, 60, (50, 3))
    return (base + rng.normal(0, 1.5, (97, 50, 3))).astype(np.float32)


def test_mean_and_m2_match_float64_two_pass(coords):
    x = coords.astype(np.float64)
    shift = shift_of(coords[0])
    mean, m2 = mean_and_m2(frame_sums(coords, shift), len(x), shift)
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-14, atol=1e-12)
    np.testing.assert_allclose(m2, ((x - x.mean(axis=0)) ** 2).sum(axis=0), rtol=1e-11, atol=1e-10)


def test_any_split_adds_to_the_same_words(coords):
    shift = shift_of(coords[0])
    whole = frame_sums(coords, shift)
    for cuts in ([0, 1, 97], [0, 40, 41, 90, 97], list(range(0, 98))):
        parts = [frame_sums(coords[a:b], shift) for a, b in zip(cuts[:-1], cuts[1:])]
        assert np.array_equal(sum(parts[::-1]), whole)   # any order too


def test_float64_big_endian_and_strided_inputs_give_the_same_words(coords):
    shift = shift_of(coords[0])
    want = frame_sums(coords.astype(np.float64), shift)
    assert np.array_equal(frame_sums(coords.astype(">f8"), shift), want)
    wide = np.zeros((97, 100, 3), np.float64)
    wide[:, ::2] = coords
    assert np.array_equal(frame_sums(wide[:, ::2], shift), want)


def test_far_or_non_finite_coordinates_name_the_frame(coords):
    shift = shift_of(coords[0])
    x = coords.copy()
    x[5, 3, 1] = np.nan
    with pytest.raises(BadCoordinatesError, match=r"traj\.h5md: .* in frame 105"):
        frame_sums(x, shift, frames=np.arange(100, 197), source="traj.h5md")
    x = coords.copy()
    x[9, 0, 0] = shift[0, 0] + 2500.0
    with pytest.raises(BadCoordinatesError, match="frame 9"):
        frame_sums(x, shift)


def test_exact_volume_sums_do_not_depend_on_order():
    rng = np.random.default_rng(3)
    v = rng.uniform(1e4, 1e6, 1000)
    parts = [exact_sum(v[a:a + 37]) for a in range(0, 1000, 37)]
    assert sum(parts) == sum(parts[::-1]) == exact_sum(v)
    assert volume_of(exact_sum(v)) == pytest.approx(float(np.sum(v, dtype=np.float64)), rel=1e-12)
