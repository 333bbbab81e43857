"""Scattered selections read as separate atom runs; strided reads skip the frames between."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
import pytest

from trajscale.convert.convert import convert
from trajscale.h5md.inspect import amplification
from trajscale.h5md.layout import Layout
from trajscale.hdf5.runs import MERGE_GAP_ATOMS, plan_atom_reads
from trajscale.sources import H5MDSource, MDASource

N = 3341   # AdK in vacuum


@pytest.fixture(scope="module")
def layouts(tmp_path_factory, adk_vacuum):
    d = tmp_path_factory.mktemp("runs")
    out = {}
    for name, lay in {"frame": Layout.parse("frame"), "7": Layout.parse("7"),
                      "contiguous": Layout.parse("contiguous"), "gzip": Layout.parse("auto", "gzip:1"),
                      "h5py": Layout.parse("h5py")}.items():
        convert(adk_vacuum[0], [adk_vacuum[1]], str(d / f"{name}.h5md"), layout=lay)
        out[name] = str(d / f"{name}.h5md")
    return out


@pytest.fixture(scope="module")
def reference(adk_vacuum):
    return mda.Universe(*adk_vacuum).trajectory.timeseries(order="fac")


def test_ca_plus_last_atom_reads_two_runs_not_the_span():
    """CA atoms of the protein and one atom at the end: the span is the whole frame, the runs ~7 %."""
    atoms = np.r_[np.arange(0, 3300, 15), 47680]
    plan = plan_atom_reads(atoms, 47681)
    assert plan.runs.tolist() == [[0, 3286], [47680, 47681]]
    assert plan.n_columns == 3287
    np.testing.assert_array_equal(plan.index, np.r_[np.arange(0, 3300, 15), 3286])   # buffer columns
    assert plan.bytes_per_frame() < 0.1 * 47681 * 12


def test_plan_keeps_span_or_whole_frames_where_they_are_cheaper():
    assert plan_atom_reads(None, 100).index is None
    contiguous = plan_atom_reads(np.arange(10, 60), 1000)
    assert contiguous.runs.tolist() == [[10, 60]] and contiguous.index is None
    near = plan_atom_reads(np.array([0, MERGE_GAP_ATOMS // 2, 900]), 10_000)   # small gap merged
    assert near.runs.tolist() == [[0, MERGE_GAP_ATOMS // 2 + 1], [900, 901]]
    assert plan_atom_reads(np.array([0, 999]), 1000).runs.tolist() == [[0, 1], [999, 1000]]
    many = plan_atom_reads(np.arange(0, 1000, 2), 1000)   # past 3/4 of a frame: whole frames
    assert many.runs.tolist() == [[0, 1000]]


@pytest.mark.parametrize("layout", ["frame", "7", "contiguous", "gzip", "h5py"])
@pytest.mark.parametrize("stride", [1, 3])
def test_scattered_and_strided_reads_equal_mdanalysis(layouts, reference, layout, stride):
    atoms = np.r_[np.arange(0, 400, 15), 3000, 3001, 3340, 1700]   # runs, unsorted, last atom
    with H5MDSource(layouts[layout]) as src:
        assert len(plan_atom_reads(atoms, N).runs) > 1
        b = src.read(5, 60, atoms, stride=stride)
        np.testing.assert_array_equal(b.positions, reference[5:60:stride][:, atoms])
        np.testing.assert_array_equal(b.frames, np.arange(5, 60, stride))
        assert b.n_frames == len(range(5, 60, stride)) == len(b.box) == len(b.time)
        src.reuse_buffers = True   # as in the task wrapper: both reused buffers stay exact
        for start in (0, 40):
            got = src.read(start, start + 30, atoms, stride=stride).positions
            np.testing.assert_array_equal(got, reference[start:start + 30:stride][:, atoms])


def test_mda_source_strided_read_equals_sliced_reader(adk_vacuum):
    u = mda.Universe(*adk_vacuum)
    expect = np.array([ts.positions[[0, 100]] for ts in u.trajectory[3:50:7]])
    times = [ts.time for ts in u.trajectory[3:50:7]]
    src = MDASource(*adk_vacuum)
    b = src.read(3, 50, np.array([0, 100]), stride=7)
    np.testing.assert_array_equal(b.positions, expect)
    np.testing.assert_allclose(b.time, times)
    np.testing.assert_array_equal(b.frames, np.arange(3, 50, 7))


def test_amplification_counts_the_runs_read():
    shape = (1000, 47681, 3)
    atoms = np.r_[np.arange(0, 3300, 15), 47680]
    # read in place (no chunks): the two runs, 3287 atoms, for 221 asked
    assert amplification(shape, None, 100, atoms) == pytest.approx(3287 / 221)
    # frame chunks, compressed: whole frames are decoded however the atoms are cut
    assert amplification(shape, (1, 47681, 3), 100, atoms) == pytest.approx(47681 / 221)
    # chunks of 128 atoms: only the chunks the two runs touch (26 + 1)
    assert amplification(shape, (1, 128, 3), 100, atoms) == pytest.approx(27 * 128 / 221)


def test_a_plan_is_made_once_for_the_same_atoms():
    """Members sharing a topology read the same atoms block after block: the plan is kept (read-only) and given
    again for equal atoms, and equals the one made afresh; other atoms or another frame width get their own."""
    from trajscale.hdf5 import runs

    atoms = np.r_[np.arange(0, 3300, 15), 3340]
    first = plan_atom_reads(atoms, N)
    again = plan_atom_reads(atoms.copy(), N)
    assert again is first and not first.runs.flags.writeable
    fresh = runs._plan(atoms, N)
    np.testing.assert_array_equal(first.runs, fresh.runs)
    assert (first.index is None) == (fresh.index is None)
    assert plan_atom_reads(atoms, N + 1) is not first and plan_atom_reads(atoms[:-1], N) is not first
    scattered = np.r_[np.arange(0, 3300, 15), 47680]
    assert plan_atom_reads(scattered, 47681).runs.tolist() == [[0, 3286], [47680, 47681]]
