"""A list of parts given with ``format="TRAJSCALE"`` is trajscale's reader, with ``continuous=`` honoured,
frame by frame as MDAnalysis's own ChainReader joins the same parts.

The parts are AdK in water (MDAnalysisTests GRO/XTC, 10 frames, 100 ps apart) cut as GROMACS restarts
cut a run: each part after the first begins at or before the previous part's last time.  Every frame of
part k is moved by 0.25*k Å, so which part's copy of a time was kept shows in the coordinates.
"""

from __future__ import annotations

import functools
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.coordinates.chain import ChainReader as MDAChainReader
from MDAnalysisTests import datafiles as D

import trajscale.mda

warnings.filterwarnings("ignore", module="MDAnalysis")


@functools.cache
def gro():
    """MDAnalysis's topology of the GRO (47,681 atoms), parsed once for the parts and the references
    (trajscale's reader is given the file, as a user gives it)."""
    return mda.Universe(D.GRO)._topology


def cut(folder, bounds, name):
    """XTC parts of the AdK-in-water frames ``[a, b)`` per bound, part k moved by 0.25*k Å."""
    u = mda.Universe(gro(), D.XTC)
    paths = []
    for k, (a, b) in enumerate(bounds):
        path = folder / f"{name}.part{k + 1:04d}.xtc"
        with mda.Writer(str(path), u.atoms.n_atoms) as w:
            for _ in u.trajectory[a:b]:
                u.atoms.positions = u.atoms.positions + np.float32(0.25 * k)
                w.write(u.atoms)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    d = tmp_path_factory.mktemp("chain")
    return {"restart": cut(d, [(0, 5), (4, 8), (7, 10)], "restart"),     # each begins at the last time
            "overlap": cut(d, [(0, 6), (3, 8), (7, 10)], "overlap"),     # part 2 begins 3 frames early
            "disjoint": cut(d, [(0, 4), (4, 7), (7, 10)], "disjoint")}


def frames(trajectory) -> list[tuple]:
    return [(ts.frame, ts.time, ts.positions.copy(), ts.dimensions.copy()) for ts in trajectory]


def assert_same_frames(got, want):
    assert [g[0] for g in got] == [w[0] for w in want]
    np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=0, atol=1e-3)
    np.testing.assert_array_equal(np.array([g[2] for g in got]), np.array([w[2] for w in want]))
    np.testing.assert_allclose(np.array([g[3] for g in got]), np.array([w[3] for w in want]), atol=1e-4)


@pytest.mark.parametrize("kind", ["restart", "overlap"])
def test_continuous_true_is_mdanalysis_continuous_chain(parts, kind):
    ours = mda.Universe(D.GRO, parts[kind], format="TRAJSCALE", continuous=True).trajectory
    ref = mda.Universe(gro(), parts[kind], continuous=True).trajectory
    assert isinstance(ours, trajscale.mda.Reader) and isinstance(ref, MDAChainReader)
    assert ours.n_frames == ref.n_frames == 10
    assert_same_frames(frames(ours), frames(ref))
    direct = trajscale.mda.Reader(parts[kind], continuous=True)
    assert direct.n_frames == 10
    assert_same_frames(frames(direct), frames(ref))


def test_restart_parts_join_as_trjcat_without_continuous(parts):
    """Restart parts share one time each: joined, the later part's frame kept (MDAnalysis's continuous
    chain); MDAnalysis's default chain keeps both copies (12 frames)."""
    ours = mda.Universe(D.GRO, parts["restart"], format="TRAJSCALE").trajectory
    assert isinstance(ours, trajscale.mda.Reader)
    assert mda.Universe(gro(), parts["restart"]).trajectory.n_frames == 12
    assert_same_frames(frames(ours), frames(mda.Universe(gro(), parts["restart"], continuous=True).trajectory))
    same = mda.Universe(D.GRO, parts["restart"], format=trajscale.mda.Reader).trajectory
    assert_same_frames(frames(same), frames(ours))


def test_disjoint_parts_are_mdanalysis_default_chain(parts):
    """Parts that share no time: every frame, with or without ``continuous`` (nothing to drop, as
    ``gmx trjcat``).  The reference is MDAnalysis's default chain: its continuous chain leaves out a
    middle part that does not overlap the one before (``chain.filter_times``), 7 frames here."""
    ref = mda.Universe(gro(), parts["disjoint"]).trajectory
    for cont in (False, True):
        ours = mda.Universe(D.GRO, parts["disjoint"], format="TRAJSCALE", continuous=cont).trajectory
        assert isinstance(ours, trajscale.mda.Reader) and ours.n_frames == ref.n_frames == 10
        assert_same_frames(frames(ours), frames(ref))


def test_overlap_without_continuous_is_refused_saying_to_pass_it(parts):
    with pytest.raises(IOError, match=r"overlap.*continuous=True") as err:
        mda.Universe(D.GRO, parts["overlap"], format="TRAJSCALE")
    assert "overlap.part0002.xtc" in str(err.value) and "overlap.part0001.xtc" in str(err.value)
    with pytest.raises(IOError, match="continuous=True"):
        trajscale.mda.Reader(parts["overlap"])


def test_other_lists_are_still_mdanalysis_chains(parts):
    u = mda.Universe(D.GRO, parts["restart"])
    assert isinstance(u.trajectory, MDAChainReader) and repr(u.trajectory).startswith("<ChainReader ")
    assert u.trajectory.n_frames == 12
    u = mda.Universe(D.PSF, [D.DCD, D.DCD], format="DCD")
    assert isinstance(u.trajectory, MDAChainReader) and u.trajectory.n_frames == 196
    import pickle

    again = pickle.loads(pickle.dumps(u.trajectory))
    assert again.n_frames == 196 and isinstance(again, MDAChainReader)
