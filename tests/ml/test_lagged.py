"""Time-lagged pairs and deeptime's estimators fed chunk by chunk.

The pairs are checked against pairs made by hand from each trajectory alone; the streamed fits against
deeptime's own fit in memory on the same list of trajectories (which makes its pairs per trajectory), for
trajectories of different lengths, with a check that a fit whose pairs crossed from one trajectory into the
next would differ.
"""

from __future__ import annotations

import numpy as np
import pytest

from trajscale.errors import ConfigError
from trajscale.ml.lagged import (
    FeatureTrajectory,
    frame_chunks,
    lagged_chunks,
    lagged_pairs,
    piece_bounds,
    stream_transform,
)
from trajscale.ml.lagged_dataset import LaggedDataset
from trajscale.ml.streaming import stream_fit

LENGTHS = (57, 3, 140, 1, 88)


def walks(lengths=LENGTHS, width=6, seed=0) -> list[np.ndarray]:
    """Correlated random walks with an offset of their own each (so that joining two makes a jump)."""
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(width, width))
    return [np.cumsum(rng.normal(size=(n, width)), axis=0) @ mix + 10 * i for i, n in enumerate(lengths)]


def stationary(lengths=LENGTHS, width=4, seed=2) -> list[np.ndarray]:
    """AR(1) processes (x_t+1 = 0.9 x_t + noise): stationary, as Koopman reweighting assumes."""
    rng = np.random.default_rng(seed)
    out = []
    for n in lengths:
        x = np.empty((n, width))
        x[0] = rng.normal(size=width)
        for t in range(1, n):
            x[t] = 0.9 * x[t - 1] + rng.normal(size=width)
        out.append(x)
    return out


def by_hand(arrays, lag):
    x = np.concatenate([a[:-lag] for a in arrays if len(a) > lag])
    y = np.concatenate([a[lag:] for a in arrays if len(a) > lag])
    return x, y


def test_pairs_stay_in_their_trajectory():
    arrays = walks()
    x, y = lagged_pairs(arrays, 2)
    want_x, want_y = by_hand(arrays, 2)
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(y, want_y)
    chunks = list(lagged_chunks(iter(arrays), 2, rows=17))   # an iterator: one pass
    assert all(len(cx) == 17 for cx, _ in chunks[:-1]) and 0 < len(chunks[-1][0]) <= 17
    np.testing.assert_array_equal(np.concatenate([c[0] for c in chunks]), want_x)
    np.testing.assert_array_equal(np.concatenate([c[1] for c in chunks]), want_y)
    np.testing.assert_array_equal(np.concatenate(list(frame_chunks(arrays, rows=50))), np.concatenate(arrays))
    with pytest.raises(ConfigError, match="features"):
        lagged_pairs([np.zeros((5, 2)), np.zeros((5, 3))], 1)
    with pytest.raises(ConfigError, match="lagtime"):
        lagged_pairs(arrays, 0)


def test_frames_that_do_not_follow_are_not_paired():
    """A gap in time (two parts with a pause between them) and an overlap (a part that starts again) cut a
    trajectory into pieces; pairs are made within each."""
    times = np.array([0, 10, 20, 30, 70, 80, 90, 100, 110, 60, 70, 80.0])
    assert piece_bounds(times).tolist() == [0, 4, 9, 12]
    assert piece_bounds(np.zeros(5)).tolist() == [0, 5]   # no times stored: one piece
    assert piece_bounds(1e6 + 2.0 * np.arange(6, dtype=np.float32)).tolist() == [0, 6]   # float32 times
    values = np.arange(12.0)[:, None]
    x, y = lagged_pairs([FeatureTrajectory("a", values, {}, times)], 2)
    want = [(0, 2), (1, 3), (4, 6), (5, 7), (6, 8), (9, 11)]
    assert list(zip(x[:, 0].tolist(), y[:, 0].tolist(), strict=True)) == want


def _covariances(model) -> dict:
    return {k: getattr(model, k) for k in ("cov_00", "cov_0t", "cov_tt", "mean_0", "mean_t")}


def _close(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.filterwarnings("ignore:Skipping trajectory")   # deeptime's, for the ones shorter than the lag
@pytest.mark.parametrize("kind", ["TICA", "VAMP"])
def test_streamed_fit_equals_deeptime_in_memory(kind):
    deeptime = pytest.importorskip("deeptime")
    make = getattr(deeptime.decomposition, kind)
    arrays = walks()
    streamed = stream_fit(make(lagtime=3), arrays, rows=23).fetch_model()
    whole = make(lagtime=3).fit(arrays).fetch_model()
    for key, want in _covariances(whole).items():
        assert _close(getattr(streamed, key), want) < 1e-10, key
    np.testing.assert_allclose(streamed.singular_values, whole.singular_values, rtol=1e-9)
    # pairs that crossed from one trajectory into the next would give other covariances
    crossed = make(lagtime=3).fit(np.concatenate(arrays)).fetch_model()
    assert _close(crossed.cov_0t, whole.cov_0t) > 1e-3
    assert _close(streamed.cov_0t, crossed.cov_0t) > 1e-3


def test_streamed_covariances_and_koopman_weights():
    deeptime = pytest.importorskip("deeptime")
    from deeptime.covariance import Covariance, KoopmanWeightingEstimator

    arrays = walks()
    kw = dict(lagtime=4, compute_c0t=True, compute_ctt=True, remove_data_mean=True)
    streamed = stream_fit(Covariance(**kw), arrays, rows=31).fetch_model()
    long = [a for a in arrays if len(a) > 4]   # (deeptime's Covariance refuses shorter ones; they give no pair)
    whole = Covariance(**kw).fit(long).fetch_model()
    for key, want in _covariances(whole).items():
        assert _close(getattr(streamed, key), want) < 1e-10, key
    arrays = stationary()
    streamed = stream_fit(KoopmanWeightingEstimator(lagtime=4), arrays, rows=31).fetch_model()
    whole = KoopmanWeightingEstimator(lagtime=4).fit([a for a in arrays if len(a) > 4]).fetch_model()
    assert np.isfinite(whole.weights_input).all()
    np.testing.assert_allclose(streamed.weights_input, whole.weights_input, rtol=1e-8)
    x = np.concatenate(arrays)
    np.testing.assert_allclose(streamed.weights(x), whole.weights(x), rtol=1e-8)
    assert deeptime is not None
    with pytest.raises(ConfigError, match="lagtime"):
        stream_fit(deeptime.decomposition.TICA(), arrays)


def test_minibatch_kmeans_sees_the_frames_in_chunks():
    """MiniBatchKMeans fed chunks of ``rows`` frames: the centres deeptime gives for the concatenated frames cut
    at the same places."""
    pytest.importorskip("deeptime")
    from deeptime.clustering import MiniBatchKMeans

    arrays = walks()
    start = np.concatenate(arrays)[[0, 60, 200]]
    streamed = stream_fit(MiniBatchKMeans(3, initial_centers=start.copy(), max_iter=3), arrays, rows=40)
    want = MiniBatchKMeans(3, initial_centers=start.copy(), max_iter=3)
    x = np.concatenate(arrays)
    for a in range(0, len(x), 40):
        want.partial_fit(x[a:a + 40])
    np.testing.assert_array_equal(streamed.fetch_model().cluster_centers, want.fetch_model().cluster_centers)
    dtrajs = stream_transform(arrays, streamed.fetch_model())
    assert [len(d) for d in dtrajs] == list(LENGTHS)
    np.testing.assert_array_equal(np.concatenate(dtrajs), want.fetch_model().transform(x))


def test_lagged_dataset_of_features():
    arrays = walks()
    trajs = [FeatureTrajectory(f"m{i}", a, {"replica": i, "system": "abc"[i % 3]}) for i, a in enumerate(arrays)]
    ds = LaggedDataset(trajs, 5, dtype=np.float64)
    want_x, want_y = by_hand(arrays, 5)
    assert len(ds) == len(want_x)
    idx = np.random.default_rng(1).permutation(len(ds))[:40]
    batch = ds.read(idx)
    np.testing.assert_array_equal(batch["x"], want_x[idx])
    np.testing.assert_array_equal(batch["y"], want_y[idx])
    owner = np.repeat([0, 2, 4], [57 - 5, 140 - 5, 88 - 5])[idx]
    assert batch["name"] == [f"m{i}" for i in owner]
    np.testing.assert_array_equal(batch["replica"], owner)
    assert batch["system"] == ["abc"[i % 3] for i in owner]
    one = ds[3]
    assert one["name"] == "m0" and one["frame"] == 3
    np.testing.assert_array_equal(one["y"], arrays[0][8])


def test_features_of_an_ensemble_member_by_member(tmp_path):
    """φ/ψ of an ensemble's members, as a run's result and as a FeatureStream of two members at a time: the
    same arrays, the missing member between them left out (not joined), and TICA streamed over the result equal
    to deeptime's fit in memory on the members' arrays."""
    pytest.importorskip("deeptime")
    import warnings

    import MDAnalysis as mda
    from deeptime.decomposition import TICA
    from MDAnalysisTests import datafiles as D

    import trajscale as ts
    from trajscale.ensemble import Ensemble, Member
    from trajscale.ml.lagged import FeatureStream, feature_arrays, trajectories
    from trajscale.testing.mdcath import from_universe

    warnings.filterwarnings("ignore", module="MDAnalysis")
    u = mda.Universe(D.PSF, D.DCD)
    path = from_universe(tmp_path / "mdcath_dataset_1adkA00.h5", u, select="resid 1-12",
                         members=[("320", "0"), ("348", "0"), ("379", "0"), ("413", "0")], n_frames=(12, 5, 30, 9))
    found = list(Ensemble.from_glob(path))
    members = [*found[:2], Member("gone", (str(tmp_path / "gone.xtc"),), D.PSF), *found[2:]]
    analysis = ts.Ramachandran(select="protein", sincos=True)
    r = ts.run(analysis, Ensemble(members), results=tmp_path / "features")
    assert [x.member.name for x in r.refused] == ["gone"]
    arrays = [r[m.name].sincos.reshape(len(r[m.name].frames), -1) for m in found]
    assert [a.shape for a in arrays] == [(12, 40), (5, 40), (30, 40), (9, 40)]

    stream = FeatureStream(analysis, Ensemble(members), members_per_run=2)
    got = list(trajectories(stream))
    assert [t.name for t in got] == [m.name for m in found]
    assert [x.member.name for x in stream.refused] == ["gone"]
    for t, want in zip(got, arrays, strict=True):
        np.testing.assert_array_equal(t.values, want)
        assert t.labels["temperature"] in (320, 348, 379, 413)
    np.testing.assert_array_equal(np.concatenate(list(feature_arrays(r))), np.concatenate(arrays))

    streamed = stream_fit(TICA(lagtime=2), r, rows=7).fetch_model()
    whole = TICA(lagtime=2).fit(arrays).fetch_model()
    for key, want in _covariances(whole).items():
        assert _close(getattr(streamed, key), want) < 1e-10, key


def test_chunks_hold_a_byte_budget_whatever_the_feature_count():
    """The default chunk is CHUNK_BYTES of rows: 647 pairs of 1,620 float64 features (both halves), 1,294
    frames, every pair of 4 features in one chunk; the pairs the same as lagged_pairs'."""
    from trajscale.ml.lagged import CHUNK_BYTES

    wide = walks((700, 400), width=1620)
    chunks = list(lagged_chunks(wide, 2))
    assert [len(x) for x, _ in chunks] == [647, 449]   # (698 + 398 pairs)
    assert CHUNK_BYTES // (2 * 1620 * 8) == 647
    x, y = lagged_pairs(wide, 2)
    np.testing.assert_array_equal(np.concatenate([c[0] for c in chunks]), x)
    np.testing.assert_array_equal(np.concatenate([c[1] for c in chunks]), y)
    assert [len(x) for x, _ in lagged_chunks(walks((700, 400), width=4), 2)] == [1096]
    assert [len(x) for x in frame_chunks(walks((2000,), width=1620))] == [1294, 706]   # (frames: one half)


def test_no_trajectory_raises_as_lagged_pairs_does():
    """Features holding no trajectory: a fit, the chunks and a transform refuse them as lagged_pairs does
    (a fit used to return an estimator without a model, a transform an empty list)."""
    deeptime = pytest.importorskip("deeptime")
    for call in (lambda: lagged_pairs([], 1), lambda: stream_fit(deeptime.decomposition.TICA(lagtime=1), []),
                 lambda: stream_transform([]), lambda: list(frame_chunks([]))):
        with pytest.raises(ConfigError, match="no trajectory in the features"):
            call()


def test_every_member_refused_each_with_its_own_reason(tmp_path):
    """A FeatureStream whose every member is refused (a missing file, a file that is no trajectory, one
    too short for its topology): stream_fit, lagged_pairs and stream_transform raise the one error, naming
    each member with its own reason, and .refused holds each one's."""
    deeptime = pytest.importorskip("deeptime")
    import trajscale as ts
    from trajscale.ensemble import Ensemble, Member
    from trajscale.errors import AllRefusedError
    from trajscale.ml.lagged import FeatureStream

    from ..support.ensembles import tiny_ensemble

    tiny_ensemble(tmp_path, 1)
    (tmp_path / "junk.xtc").write_bytes(b"no trajectory here" * 8)
    (tmp_path / "cut.xtc").write_bytes((tmp_path / "t00000.xtc").read_bytes()[:30])
    top = str(tmp_path / "top.pdb")
    names = ("gone", "junk", "cut")
    stream = FeatureStream(ts.Distances("index 0", "index 1", pbc=False),
                           Ensemble([Member(n, (str(tmp_path / f"{n}.xtc"),), top) for n in names], origin="three"))
    errors = []
    for call in (lambda: stream_fit(deeptime.decomposition.TICA(lagtime=1), stream),
                 lambda: lagged_pairs(stream, 1), lambda: stream_transform(stream)):
        with pytest.raises(AllRefusedError) as e:
            call()
        errors.append(str(e.value))
    assert errors[0] == errors[1] == errors[2]
    reasons = {r.member.name: r.reason for r in stream.refused}
    assert list(reasons) == list(names)
    assert len(set(reasons.values())) == 3, reasons
    for n in names:
        assert f"{n}: {reasons[n]}" in errors[0]
        others = [f"{m}.xtc" for m in names if m != n]
        assert not any(o in reasons[n] for o in others), reasons
    assert errors[0].startswith("three: every one of its 3 trajectories was refused: gone: ")


def test_a_streamed_tica_holds_two_sets_of_moments_however_many_chunks():
    """1,024 chunks of 200 features: TICA's own covariance estimator keeps one set of moments per doubling of
    the chunks (10 here, 640 kB each); stream_fit's holds at most MOMENTS, so what is allocated between
    two chunks (sampled by the transform each chunk goes through) stays within a few sets, and the model
    equals deeptime's in memory."""
    deeptime = pytest.importorskip("deeptime")
    import tracemalloc

    width = 200
    seen = []

    def sample(x):
        seen.append(tracemalloc.get_traced_memory()[0])
        return x

    arrays = walks((1025,), width=width)
    tracemalloc.start()
    try:
        streamed = stream_fit(deeptime.decomposition.TICA(lagtime=1), arrays, rows=1, transform=sample)
    finally:
        tracemalloc.stop()
    one_set = 2 * width * width * 8   # (C00 and C0t)
    assert max(seen[16:]) - min(seen[16:]) < 3 * one_set, (max(seen) - min(seen)) / one_set   # (MOMENTS + 1)
    whole = deeptime.decomposition.TICA(lagtime=1).fit(arrays).fetch_model()
    for key, want in _covariances(whole).items():
        assert _close(getattr(streamed.fetch_model(), key), want) < 1e-10, key
