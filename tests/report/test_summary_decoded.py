"""The run summary names who decoded whole frames when more atoms were decoded than the analysis kept."""

from __future__ import annotations

import pytest

import trajscale as ts
from trajscale.convert.rechunk import rechunk
from trajscale.convert.split import split
from trajscale.report.summary import run_summary
from trajscale.store.layout import Layout


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
