"""LaggedEnsembleDataset over mdCATH-shaped files of two atom counts and a trajectory of two XTC parts with a
pause between them: every pair equals h5py's (MDAnalysis's) read of frames t and t + τ of one member, no pair
spans two members or the pause, a batch is read in contiguous runs, and torch's DataLoader serves every pair
once per epoch in an order fixed by the seed and the epoch."""

from __future__ import annotations

import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.ml.conftest import mdcath_files
from trajscale.ensemble import Ensemble, Member
from trajscale.errors import ConfigError
from trajscale.ml.lagged_dataset import LaggedEnsembleDataset

warnings.filterwarnings("ignore", module="MDAnalysis")

LAG = 3
#: domain -> (selection, members, frames per member)
DOMAINS = {"1aaaA00": ("resid 1-30", (("320", "0"), ("348", "1")), (9, 4)),
           "2bbbB00": ("resid 31-70", (("379", "2"),), (12,))}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("lagged")
    u = mda.Universe(D.PSF, D.DCD)
    mdcath = mdcath_files(d, u, DOMAINS)
    ca = u.select_atoms("name CA")
    top = str(d / "ca.pdb")
    ca.write(top)
    parts, coords = [], []   # coords: MDAnalysis's read of each part
    for k, (frames, t0) in enumerate([(range(0, 7), 0.0), (range(7, 12), 100.0)]):   # a pause from 6 to 100 ps
        parts.append(str(d / f"part{k}.xtc"))
        with mda.Writer(parts[-1], ca.n_atoms) as w:
            for j, fr in enumerate(frames):
                u.trajectory[fr]
                u.trajectory.ts.time = t0 + j
                w.write(ca)
        coords += [ts_.positions.copy() for ts_ in mda.Universe(top, parts[-1]).trajectory]   # as XTC keeps them
    return mdcath, Member("ca", tuple(parts), top, {"domain": "ca"}), np.array(coords)


def reference(files) -> list[tuple[str, np.ndarray]]:
    """(member name, coords) in the dataset's order."""
    mdcath, _, xtc = files
    out = []
    for path in mdcath:
        with h5py.File(path, "r") as f:
            dom = next(iter(f))
            for t in sorted(k for k in f[dom] if k.isdigit()):
                for r in sorted(f[dom][t]):
                    out.append((f"{dom}/{t}/{r}", f[dom][t][r]["coords"][()]))
    out.append(("ca", xtc))
    return out


def expected_pairs(files) -> list[tuple[str, int, np.ndarray, np.ndarray]]:
    """(member, t, x_t, x_{t+τ}) of every pair, by hand: within each member, and within each part of the
    XTC member (its parts do not follow each other)."""
    out = []
    for name, x in reference(files):
        pieces = [(0, 7), (7, 12)] if name == "ca" else [(0, len(x))]
        out += [(name, t, x[t], x[t + LAG]) for a, b in pieces for t in range(a, b - LAG)]
    return out


def test_every_pair_equals_its_frames(files):
    mdcath, xtc, _ = files
    ds = LaggedEnsembleDataset(Ensemble.of([*Ensemble.from_glob(str(mdcath[0]).replace("1aaaA00", "*")), xtc]),
                               LAG)
    want = expected_pairs(files)
    assert ds.names == ("1aaaA00/320/0", "1aaaA00/348/1", "2bbbB00/379/2", "ca")
    assert len(ds) == len(want) == (9 - 3) + (4 - 3) + (12 - 3) + (7 - 3) + (5 - 3)
    # unsorted with repeats (read together, then put in order), and in order (a sampler's batch: per member, the
    # mdCATH frames t and t + τ each in one call, the XTC member's runs of both read once)
    for index in (np.r_[np.random.default_rng(0).permutation(len(ds)), [2, 2]], np.arange(len(ds))):
        batch = ds.read(index)
        edges = np.r_[0, np.cumsum(batch["n_atoms"])]
        for i, k in enumerate(index.tolist()):
            name, t, x, y = want[k]
            assert (batch["name"][i], ds.names[batch["trajectory"][i]], batch["frame"][i]) == (name, name, t)
            np.testing.assert_allclose(batch["x"][edges[i]:edges[i + 1]], x, rtol=1e-6, atol=1e-3)
            np.testing.assert_allclose(batch["y"][edges[i]:edges[i + 1]], y, rtol=1e-6, atol=1e-3)
        np.testing.assert_allclose(batch["time_lagged"] - batch["time"],
                                   np.where(np.array(batch["name"]) == "ca", LAG, LAG * 1000.0))
        assert batch["domain"] == [n.split("/")[0] for n in batch["name"]]
        assert batch["temperature"] == [None if n == "ca" else int(n.split("/")[1]) for n in batch["name"]]
        assert list(batch)[:4] == ["x", "y", "time_lagged", "time"] and len(batch["x"]) == edges[-1]
    x, y = ds.pairs(np.arange(len(ds) - 6, len(ds)))   # the XTC member's pairs, as deeptime's (X, Y)
    np.testing.assert_allclose(x, np.array([w[2] for w in want[-6:]]).reshape(6, -1), atol=1e-3)
    np.testing.assert_allclose(y, np.array([w[3] for w in want[-6:]]).reshape(6, -1), atol=1e-3)
    with pytest.raises(ConfigError, match="atoms"):
        ds.pairs()


def test_a_block_of_pairs_is_read_in_one_go(files):
    ds = LaggedEnsembleDataset(files[0], LAG)
    ds.read(np.arange(0, 6))   # pairs t = 0..5 of a local mdCATH member: frames 0..5 in one call, 3..8 in another
    assert ds.stats.reads == 2
    xtc = LaggedEnsembleDataset([files[1]], LAG)
    xtc.read(np.arange(0, 4))   # pairs t = 0..3 of the XTC member's first part: frames 0..6, read once
    assert xtc.stats.reads == 1
    one = ds[7]   # the first pair of the third member
    assert one["name"] == "2bbbB00/379/2" and one["frame"] == 0 and one["x"].shape == (one["n_atoms"], 3)


def test_a_member_that_cannot_be_read_is_left_out_with_its_reason(files, tmp_path):
    """A damaged file and a missing one among the members: the dataset serves the pairs of the others (their
    frames as MDAnalysis reads them) and lists the two as refused, each with its reason."""
    _, xtc, _ = files
    (tmp_path / "noise.xtc").write_bytes(np.random.default_rng(1).bytes(5000))
    damaged = Member("noise", (str(tmp_path / "noise.xtc"),), xtc.topology)
    gone = Member("gone", (str(tmp_path / "gone.xtc"),), xtc.topology)
    ds = LaggedEnsembleDataset([damaged, xtc, gone], LAG)
    assert ds.names == ("ca",) and [(r.index, r.member.name) for r in ds.refused] == [(0, "noise"), (2, "gone")]
    assert "noise.xtc" in ds.refused[0].reason and "gone.xtc" in ds.refused[1].reason
    want = [w for w in expected_pairs(files) if w[0] == "ca"]
    x, y = ds.pairs()
    assert len(ds) == len(want) == (7 - LAG) + (5 - LAG)
    np.testing.assert_allclose(x, np.array([w[2] for w in want]).reshape(len(want), -1), atol=1e-3)
    np.testing.assert_allclose(y, np.array([w[3] for w in want]).reshape(len(want), -1), atol=1e-3)


def test_torch_epochs_are_seeded(files):
    pytest.importorskip("torch")
    from trajscale.ml import make_loader

    ds = LaggedEnsembleDataset(files[0], LAG)
    loader = make_loader(ds, batch_size=4, block=2, seed=5)

    def epoch(e):
        loader.sampler.set_epoch(e)
        return [tuple(zip(b["name"], b["frame"].tolist(), strict=True)) for b in loader]

    first = epoch(0)
    assert sorted(p for b in first for p in b) == sorted(
        (n, t) for n, t, _, _ in expected_pairs(files) if n != "ca")
    assert epoch(0) == first and epoch(1) != first


def test_a_batch_holds_its_frames_and_its_pairs_and_little_more(files):
    """A batch's read holds, at its peak, the frames it reads and the pairs it returns (tracemalloc's count of
    NumPy's buffers), not an index of every atom it moves: pairs asked many times over, in shuffled order,
    cost their own bytes and no more."""
    import tracemalloc

    ds = LaggedEnsembleDataset(files[0], LAG)
    want = [w for w in expected_pairs(files) if w[0] != "ca"]
    assert len(ds) == len(want)
    index = np.tile(np.random.default_rng(2).permutation(len(ds)), 20)
    frames = {(name, t + d) for name, t, _, _ in want for d in (0, LAG)}   # each frame read once
    atoms = {name: len(x) for name, _, x, _ in want}
    read_bytes = sum(atoms[name] * 12 for name, _ in frames)
    pair_bytes = 2 * sum(atoms[want[k][0]] * 12 for k in index.tolist())
    ds.read(index[:4])   # (files opened and Sources made: kept with the dataset, not the batch's)
    tracemalloc.start()
    try:
        batch = ds.read(index)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert batch["x"].nbytes + batch["y"].nbytes == pair_bytes
    assert peak <= 1.1 * (read_bytes + pair_bytes) + 100_000, (peak, read_bytes, pair_bytes)


@pytest.fixture(scope="module")
def gapped(tmp_path_factory):
    """An H5MD file of AdK's CA atoms, 24 frames 10 ps apart but for two frames dropped after 170 ps (170 ->
    200 ps) and a pause after 300 ps (300 -> 1000 ps); a copy of it whose frame 5 holds a NaN."""
    from trajscale.convert.convert import convert

    d = tmp_path_factory.mktemp("gapped")
    u = mda.Universe(D.PSF, D.DCD)
    ca = u.select_atoms("name CA")
    top = str(d / "ca.pdb")
    ca.write(top)
    times = [10.0 * k for k in range(18)] + [200.0 + 10 * k for k in range(11)] + [1000.0 + 10 * k for k in range(6)]
    xtc = str(d / "gapped.xtc")
    with mda.Writer(xtc, ca.n_atoms) as w:
        for fr, t in zip(range(len(times)), times, strict=True):
            u.trajectory[fr]
            u.trajectory.ts.time = t
            w.write(ca)
    h5md = str(d / "gapped.h5md")
    convert(top, [xtc], h5md)
    nan = str(d / "nan.h5md")
    import shutil

    shutil.copy(h5md, nan)
    with h5py.File(nan, "r+") as f:
        x = f["particles/all/position/value"][5]
        x[1, 2] = np.nan
        f["particles/all/position/value"][5] = x
    return h5md, nan, top


def test_pairs_are_cut_where_a_run_cuts_them(gapped):
    """The dataset's pairs are the pairs h5py's times allow (NumPy, by hand: within runs of 10 ps steps) and
    lagged_pairs' on a run's features (the frames' own coordinates as features): none spans the dropped
    frames or the pause; a member with a NaN is refused as a run refuses it, with the same reason."""
    import trajscale as ts
    from trajscale.ml.lagged import lagged_pairs

    h5md, nan, top = gapped
    with h5py.File(h5md, "r") as f:
        t = f["particles/all/position/time"][()]
        x = f["particles/all/position/value"][()]
    run_of = np.cumsum(np.r_[0, ~np.isclose(np.diff(t), 10.0)])   # each frame's run of 10 ps steps
    want = [k for k in range(len(t) - LAG) if run_of[k] == run_of[k + LAG]]
    assert 14 in want and 15 not in want and len(want) == len(t) - 3 * LAG
    ds = LaggedEnsembleDataset([Member("gapped", (h5md,), None), Member("nan", (nan,), None)], LAG)
    got = ds.read(np.arange(len(ds)))
    assert got["frame"].tolist() == want
    np.testing.assert_array_equal(got["time_lagged"] - got["time"], 10.0 * LAG)
    np.testing.assert_array_equal(ds.pairs()[0], x[want].reshape(len(want), -1))
    np.testing.assert_array_equal(ds.pairs()[1], x[np.array(want) + LAG].reshape(len(want), -1))
    r = ts.run(ts.Distances("index 0", "index 1", pbc=False), ts.Ensemble([Member("gapped", (h5md,), top),
                                                                 Member("nan", (nan,), top)]))
    features = [ts.ml.lagged.FeatureTrajectory(m.name, res.frames[:, None].astype(np.float64), {},
                                                np.asarray(res.times)) for m, res in r.items()]
    frames_x, _ = lagged_pairs(features, LAG)
    assert frames_x[:, 0].tolist() == want
    assert [(x.member.name, x.reason) for x in ds.refused] == [(x.member.name, x.reason) for x in r.refused]
    assert "NaN/inf coordinates in frame 5" in ds.refused[0].reason
