"""The offsets a segment index records are its XTC parts' offsets index, local parts' as remote ones': a run
on the index scans no part again, reads MDAnalysis's frames, and a part changed since it was indexed is
refused when it opens (its offsets past its end) or when a frame's header disagrees, never read as garbage."""

from __future__ import annotations

import logging
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.lib.formats.libmdaxdr import XTCFile
from MDAnalysisTests import datafiles as D

from trajscale.convert.split import build_index
from trajscale.errors import InputFileError
from trajscale.sources import open_source


@pytest.fixture
def indexed(tmp_path):
    """AdK's 10 frames cut into two XTC parts at a frame's byte (5 + 5), indexed by ``trajscale index``."""
    with XTCFile(D.XTC) as f:
        offsets = [int(o) for o in f.offsets]
    data = Path(D.XTC).read_bytes()
    parts = [tmp_path / "adk.part0001.xtc", tmp_path / "adk.part0002.xtc"]
    parts[0].write_bytes(data[:offsets[5]])
    parts[1].write_bytes(data[offsets[5]:])
    return build_index([str(p) for p in parts], tmp_path / "index.json", D.TPR), parts


def test_a_run_on_an_index_scans_no_local_part_and_reads_mdanalysis_frames(indexed, caplog):
    index, _ = indexed
    u = mda.Universe(D.TPR, D.XTC)
    sel = np.array([0, 17, 4000, 47680])
    want = np.array([ts.positions[sel] for ts in u.trajectory])
    with caplog.at_level(logging.DEBUG, logger="trajscale"), open_source(index) as src:
        cfg = src.get_config()   # (what a worker is shipped: every part's offsets)
        got = src.read(0, src.n_frames, sel).positions
    assert not [r for r in caplog.records if "frame offsets scanned" in r.getMessage()], caplog.text
    assert all(seg["offsets"] for seg in cfg["segments"])
    np.testing.assert_array_equal(got, want)


def test_a_part_cut_short_after_it_was_indexed_is_refused_when_it_opens(indexed):
    index, parts = indexed
    data = parts[1].read_bytes()
    parts[1].write_bytes(data[:len(data) // 2])
    with open_source(index) as src, pytest.raises(InputFileError, match=r"part0002\.xtc.*past its \d+ bytes"):
        src.read(0, src.n_frames)


def test_a_part_replaced_after_it_was_indexed_is_refused_at_its_first_frame(indexed):
    """Another trajectory of as many bytes under the part's name: the recorded offsets fall inside it, and the
    decoder checks each frame's header (atom count) before it decodes the frame."""
    index, parts = indexed
    size = parts[1].stat().st_size
    other = Path(D.COORDINATES_XTC).read_bytes()   # 5 atoms a frame
    parts[1].write_bytes((other * (size // len(other) + 1))[:size])
    with open_source(index) as src, pytest.raises(InputFileError, match=r"part0002\.xtc"):
        src.read(0, src.n_frames)
