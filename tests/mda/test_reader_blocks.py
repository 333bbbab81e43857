"""trajscale.mda.Reader across many read-ahead blocks, with dt, jumps and slices in between,
frame by frame against MDAnalysis's own readers.

``block_bytes`` is set to about two frames, so every walk crosses a block boundary every other
frame and the read-ahead thread is decoding the next block while the test asks for ``dt``
(two frames read on the main thread) or jumps: both threads use the reader's one file handle.
"""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.coordinates.DCD import DCDReader
from MDAnalysis.coordinates.H5MD import H5MDReader
from MDAnalysis.coordinates.TRR import TRRReader
from MDAnalysis.coordinates.XTC import XTCReader
from MDAnalysisTests import datafiles as D

import trajscale.mda

CASES = {
    "xtc": (lambda: XTCReader(D.XTC), lambda **kw: trajscale.mda.Reader(D.XTC, **kw)),
    "trr": (lambda: TRRReader(D.TRR), lambda **kw: trajscale.mda.Reader(D.TRR, **kw)),
    "h5md": (lambda: H5MDReader(D.H5MD_xvf), lambda **kw: trajscale.mda.Reader(D.H5MD_xvf, **kw)),
    "dcd": (lambda: DCDReader(D.DCD), lambda **kw: trajscale.mda.Reader(D.DCD, topology=D.PSF, **kw)),
}


def _frames(reader) -> list[tuple]:
    """Every frame of MDAnalysis's reader: positions, time, box (None when it has none)."""
    out = []
    for ts in reader:
        out.append((ts.positions.copy(), ts.time,
                    None if ts.dimensions is None else ts.dimensions.copy()))
    return out


def _same(ts, want, what) -> None:
    pos, time, box = want
    # the XDR/DCD/H5MD floats decoded by both readers, scaled to Å in float32 by each
    np.testing.assert_allclose(ts.positions, pos, rtol=1e-6, atol=1e-5, err_msg=f"{what}: frame {ts.frame}")
    assert ts.time == pytest.approx(time, abs=1e-4), (what, ts.frame)
    if box is None:
        assert ts.dimensions is None, (what, ts.frame)
    else:
        np.testing.assert_allclose(ts.dimensions, box, rtol=1e-6, atol=1e-4, err_msg=f"{what}: box {ts.frame}")


def _dt(reader) -> float:
    """``reader.dt`` read anew: MDAnalysis keeps it in ``ts.data``, so it is dropped first."""
    reader.ts.data.pop("dt", None)
    return reader.dt


@pytest.mark.parametrize("kind", sorted(CASES))
def test_blocks_dt_jumps_and_slices_match_mdanalysis(kind):
    make_ref, make_ours = CASES[kind]
    ref = make_ref()
    want = _frames(ref)
    ref_dt = float(want[1][1] - want[0][1])   # MDAnalysis's times (its H5MDReader has no dt of its own)
    ref.close()
    n = len(want)
    probe = make_ours()
    frame_bytes = probe._source.bytes_per_frame(None, probe._source.fields)
    probe.close()
    ours = make_ours(block_bytes=2 * frame_bytes)
    try:
        assert ours.n_frames == n and ours._frames_per_block() == 2
        rng = np.random.default_rng(7)
        for rounds in range(3):   # the read-ahead decodes while dt reads frames 0 and 1
            for ts in ours:
                assert _dt(ours) == pytest.approx(ref_dt, abs=1e-4)
                _same(ts, want[ts.frame], f"{kind} walk {rounds}")
        for i in rng.integers(0, n, 25).tolist():   # jumps, each after a dt
            _dt(ours)
            _same(ours[i], want[i], f"{kind} jump")
        for sel in (slice(1, None, 3), slice(None, None, 2), slice(None, None, -2), [n - 1, 1, 1, n // 2],
                    np.arange(n) % 3 != 1):
            idx = np.arange(n)[sel].tolist()
            got = []
            for ts in ours[sel]:
                _dt(ours)
                _same(ts, want[ts.frame], f"{kind} {sel}")
                got.append(ts.frame)
            assert got == idx
        # a walk interrupted by a jump, then resumed from the jump
        for k, _ts in enumerate(ours):
            if k == n // 2:
                break
        j = int(rng.integers(0, n))
        _same(ours[j], want[j], f"{kind} jump mid-walk")
        for ts in ours[j:]:
            _dt(ours)
            _same(ts, want[ts.frame], f"{kind} resumed walk")
    finally:
        ours.close()


def test_universe_walk_with_small_blocks_matches_mdanalysis():
    """Through a Universe, as users write it: an XTC walked in 2-frame blocks with dt asked each frame."""
    ref = mda.Universe(D.GRO, D.XTC)
    ours = mda.Universe(D.GRO, D.XTC, format="TRAJSCALE", block_bytes=2 * 12 * ref.atoms.n_atoms)
    for a, b in zip(ours.trajectory, ref.trajectory, strict=False):
        assert _dt(ours.trajectory) == pytest.approx(ref.trajectory.dt, abs=1e-4)
        np.testing.assert_allclose(a.positions, b.positions, rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(a.dimensions, b.dimensions, rtol=1e-6, atol=1e-4)
