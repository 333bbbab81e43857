"""``convert --step`` reads only the kept frames, in bounded blocks."""

from __future__ import annotations

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from trajscale.convert import stream
from trajscale.convert.convert import convert
from trajscale.errors import ConfigError, InputFileError
from trajscale.h5md.layout import Layout
from trajscale.sources import H5MDSource


@pytest.fixture(scope="module")
def reference(adk_vacuum):
    u = mda.Universe(*adk_vacuum)
    return u.trajectory.timeseries(order="fac"), np.array([ts.time for ts in u.trajectory])


@pytest.fixture
def checksummed(tmp_path, adk_vacuum):
    """AdK (98 frames) in one-frame chunks with Fletcher32 checksums."""
    path = tmp_path / "sum.h5md"
    convert(adk_vacuum[0], [adk_vacuum[1]], str(path), layout=Layout.parse("frame", "none", fletcher32=True))
    return path


def _corrupt_frames(path, frames) -> None:
    """Overwrite the stored chunks of ``frames`` with garbage: reading them fails its checksum."""
    with h5py.File(path, "r") as f:
        ds = f["particles/all/position/value"]
        spans = [ds.id.get_chunk_info_by_coord((int(i), 0, 0)) for i in frames]
    with open(path, "r+b") as fh:
        for info in spans:
            fh.seek(info.byte_offset + 100)
            fh.write(b"\xff" * 64)


def test_step_never_reads_the_skipped_frames(tmp_path, adk_vacuum, checksummed, reference):
    kept = set(range(3, 98, 20))
    _corrupt_frames(checksummed, [i for i in range(98) if i not in kept])
    with H5MDSource(str(checksummed)) as src, pytest.raises(InputFileError, match="cannot read frame 4"):
        src.read(4, 5)                                   # the damage is real
    out = tmp_path / "every20.h5md"
    s = convert(adk_vacuum[0], [str(checksummed)], str(out), start=3, step=20)
    assert s.n_frames == 5
    pos, times = reference
    with H5MDSource(str(out)) as got:
        b = got.read(0, 5)
        np.testing.assert_allclose(b.positions, pos[3:98:20], rtol=0, atol=1e-5)
        np.testing.assert_allclose(b.time, times[3:98:20], rtol=1e-6)


def test_step_over_several_files_matches_the_concatenation(tmp_path, adk_vacuum, reference):
    """The global start:stop:step across two inputs picks the same frames as slicing their concatenation."""
    pos, _ = reference
    out = tmp_path / "two.h5md"
    s = convert(adk_vacuum[0], [adk_vacuum[1], adk_vacuum[1]], str(out), start=10, stop=190, step=7)
    both = np.concatenate([pos, pos])
    with H5MDSource(str(out)) as got:
        assert s.n_frames == got.n_frames == len(range(10, 190, 7))
        np.testing.assert_allclose(got.read(0, got.n_frames).positions, both[10:190:7], atol=1e-5)


def test_blocks_stay_within_the_slab_budget(monkeypatch, adk_vacuum):
    from trajscale.sources import MDASource

    monkeypatch.setattr(stream, "SLAB_BYTES", 5 * 3341 * 12)
    src = MDASource(*adk_vacuum)
    blocks = list(stream.iter_blocks([src], None, ("position",), step=3))
    assert sum(b.n_frames for b in blocks) == len(range(0, 98, 3))
    assert max(b.positions.nbytes for b in blocks) <= 5 * 3341 * 12


def test_negative_step_is_refused():
    with pytest.raises(ConfigError, match="step"):
        stream.frame_plan([10], None, None, -1)
