"""The run summary names who decoded whole frames when more atoms were decoded than the analysis kept."""

from __future__ import annotations

import dataclasses

import pytest

import trajscale as ts
from trajscale.convert.rechunk import rechunk
from trajscale.convert.split import split
from trajscale.h5md.layout import Layout
from trajscale.report.summary import run_summary


def _summary(top, traj) -> str:
    return run_summary(ts.run(ts.RMSD(select="name CA"), top, traj).report)


def test_who_decoded_whole_frames(tmp_path, adk_vacuum, adk_vacuum_h5md):
    pytest.importorskip("hdf5plugin")
    whole = f"MDAnalysis decoded whole frames of 3341 atoms, {98 * 3341 * 12 / 1e9:.3f} GB"
    assert whole in _summary(*adk_vacuum)                       # the DCD: MDAnalysis's reader
    assert "decoded whole" not in _summary(adk_vacuum[0], adk_vacuum_h5md)   # H5MD: the CA bytes only
    parts = split(adk_vacuum_h5md, tmp_path / "parts", 3)       # H5MD parts: the same (was "MDAnalysis")
    assert "decoded whole" not in _summary(adk_vacuum[0], parts)
    deltas = tmp_path / "d.h5md"
    rechunk(adk_vacuum_h5md, deltas, Layout.parse("auto", "blosc-lz4"), precision=0.01, encoding="deltas")
    assert "trajscale decoded whole frames of 3341 atoms" in _summary(adk_vacuum[0], str(deltas))


def test_an_xtc_is_decoded_by_trajscale_up_to_the_last_selected_atom(tmp_path):
    """AdK in water: trajscale's own XTC decoder reads each frame as far as the last CA, and MDAnalysis
    never decodes a frame; a followed run of the same file gives no advice to convert the file it follows."""
    import shutil

    from MDAnalysisTests.datafiles import TPR, XTC

    from trajscale.follow import FollowOptions
    from trajscale.report.advice import diagnose, rule_io_bound_format

    said = run_summary(ts.run(ts.RMSD(select="name CA"), TPR, XTC).report)
    assert "trajscale's XTC decoder decoded each frame of 47681 atoms up to the last selected atom" in said
    assert "MDAnalysis decoded" not in said
    traj = tmp_path / "adk.xtc"
    shutil.copy(XTC, traj)
    (tmp_path / "adk.xtc.done").touch()
    plain = ts.run(ts.RMSD(select="name CA"), TPR, str(traj)).report
    followed = ts.run(ts.RMSD(select="name CA"), TPR, str(traj), follow=FollowOptions(idle=60)).report
    assert followed.meta.follow.ended == "complete"
    io_bound = dataclasses.replace(diagnose(plain), r_comp_io=0.1)   # the rule's condition, on both runs
    assert "convert to H5MD" in rule_io_bound_format(plain, io_bound).message
    assert rule_io_bound_format(followed, io_bound) is None


def test_a_trr_is_read_whole_by_trajscale():
    """A TRR's frames are read whole by trajscale's own reader (MDAnalysis never decodes one)."""
    from MDAnalysisTests.datafiles import TPR, TRR

    said = run_summary(ts.run(ts.RMSD(select="name CA"), TPR, TRR).report)
    assert f"trajscale's TRR reader decoded whole frames of 47681 atoms, {10 * 47681 * 12 / 1e9:.3f} GB" in said
    assert "MDAnalysis decoded" not in said
