"""Fixed-point frame sums (kernels.sums): exact across splits, accurate against NumPy float64."""

from __future__ import annotations

import numpy as np
import pytest

from trajscale.errors import BadCoordinatesError
from trajscale.kernels import _sums
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
        parts = [frame_sums(coords[a:b], shift) for a, b in zip(cuts[:-1], cuts[1:], strict=False)]
        assert np.array_equal(sum(parts[::-1]), whole)   # any order too


def test_float64_big_endian_and_strided_inputs_give_the_same_words(coords):
    shift = shift_of(coords[0])
    want = frame_sums(coords.astype(np.float64), shift)
    assert np.array_equal(frame_sums(coords.astype(">f8"), shift), want)
    wide = np.zeros((97, 100, 3), np.float64)
    wide[:, ::2] = coords
    assert np.array_equal(frame_sums(wide[:, ::2], shift), want)


def reference_words(x: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """The words by their definition, in NumPy: d = x - shift in float64, q = rint(d * 2**40) as
    (q >> 32, q & 0xFFFFFFFF); s = (d * d) * 2**8 as (floor(s), rint((s - floor(s)) * 2**32))."""
    d = x.astype(np.float64) - shift
    q = np.rint(d * 2.0**40).astype(np.int64)
    s = (d * d) * 256.0
    w = np.floor(s)
    return np.stack([(q >> 32).sum(0), (q & 0xFFFFFFFF).sum(0), w.astype(np.int64).sum(0),
                     np.rint((s - w) * 2.0**32).astype(np.int64).sum(0)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("simd", [0, 2, 3])
def test_words_are_the_definition_at_every_vector_width(dtype, simd):
    """Ties of the 2**-40 grid (both signs), values near the 2,048 Å limit, tiny ones and squares whose
    low word rounds up to 2**32, over 37 frames (not a multiple of the kernel's frame groups) and
    300 atoms (tiles of 128 and a partial one), at the baseline vector width, AVX2's and AVX-512's (where the
    CPU has them)."""
    rng = np.random.default_rng(11)
    n_frames, n_atoms = 37, 300
    shift = np.round(rng.uniform(-60, 60, (n_atoms, 3)) * 2.0**20) / 2.0**20
    d = rng.normal(0, 2.0, (n_frames, n_atoms, 3))
    kind = rng.integers(0, 6, d.shape)
    ties = (2 * rng.integers(0, 2**20, d.shape) + 1) * 2.0**-41 * rng.choice([-1, 1], d.shape)
    d = np.where(kind == 0, ties, d)
    d = np.where(kind == 1, rng.uniform(-2047.9, 2047.9, d.shape), d)
    d = np.where(kind == 2, rng.normal(0, 1e-9, d.shape), d)
    x = shift + d
    shift[:10] = 0.0   # (1/16 - 2**-57)**2 * 2**8 = 1 - 2**-52: its low word rounds to 2**32
    x[:, :10] = np.nextafter(1 / 16, 0) * rng.choice([-1, 1], (n_frames, 10, 3))
    x = x.astype(dtype)
    out = np.zeros((4, n_atoms, 3), np.int64)
    assert _sums.fixed_sums(x, shift, out, True, simd) == -1
    want = reference_words(x, shift)
    assert np.array_equal(out, want)
    if dtype == np.float64:
        assert (want[3] == 37 * 2**32).any()
    out[:] = 0
    assert _sums.fixed_sums(x, shift, out, False, simd) == -1
    assert np.array_equal(out[:2], want[:2]) and not out[2:].any()


def test_the_first_bad_frame_is_named_whatever_its_atom():
    """A bad value in frame 3 of atom 200 (the second tile of atoms) comes before one in frame 10 of
    atom 0 (the first tile): frame 3 is named."""
    x = np.zeros((20, 300, 3), np.float32)
    x[10, 0, 0] = np.nan
    x[3, 200, 2] = 3000.0
    assert _sums.fixed_sums(x, np.zeros((300, 3)), np.zeros((4, 300, 3), np.int64), True) == 3


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
