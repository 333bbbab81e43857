"""A growing XTC/TRR: the follower's scan (``_xdr.scan_growing``) counts exactly the frames whose every byte is
written, whatever byte the writer has reached, in one scan; the frames read as MDAnalysis reads the finished file.
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysis.lib.formats.libmdaxdr import TRRFile
from MDAnalysisTests.datafiles import DCD, PSF

import trajscale as ts
from tests.sources.test_follow import producer
from trajscale.errors import InputFileError
from trajscale.follow import FollowOptions, last_line
from trajscale.sources.follow import snapshot
from trajscale.xdr import _xdr
from trajscale.xdr.follow import complete_offsets

warnings.filterwarnings("ignore", module="MDAnalysis")


def _write_with_mdanalysis(path: Path, n_frames: int = 4, n_atoms: int = 40) -> None:
    """The first ``n_atoms`` atoms of PSF/DCD, frame by frame, through MDAnalysis's XTCWriter/TRRWriter."""
    u = mda.Universe(PSF, DCD)
    with mda.Writer(str(path), n_atoms) as w:
        for _ in u.trajectory[:n_frames]:
            w.write(u.atoms[:n_atoms])


def _mdanalysis_frames(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """MDAnalysis's reader of the finished file: each frame's positions, and where each frame's last byte is."""
    reader = mda.coordinates.XTC.XTCReader(str(path)) if path.suffix == ".xtc" else \
        mda.coordinates.TRR.TRRReader(str(path))
    try:
        frames = np.array([t.positions.copy() for t in reader])
        offsets = np.asarray(reader._xdr.offsets)
    finally:
        reader.close()
    return frames, np.append(offsets[1:], path.stat().st_size)


@pytest.mark.parametrize("fmt", ["xtc", "trr"])
def test_a_write_caught_at_any_byte_shows_exactly_the_whole_frames(tmp_path, fmt):
    """The finished file cut at every byte, as a reader can find a file that MDAnalysis's writer appends to
    (its buffer reaches the disk in pieces that end anywhere, inside a frame's first word too)."""
    full = tmp_path / f"full.{fmt}"
    _write_with_mdanalysis(full)
    reference, ends = _mdanalysis_frames(full)
    data = full.read_bytes()
    growing = tmp_path / f"growing.{fmt}"
    for at in range(len(data) + 1):
        growing.write_bytes(data[:at])
        whole = int(np.sum(ends <= at))
        n_atoms, offsets, complete = complete_offsets(str(growing), fmt.upper())
        assert (len(offsets), complete) == (whole, ends[whole - 1] if whole else 0), at
        if not whole:
            with pytest.raises(InputFileError, match="no complete frame yet"):
                snapshot(str(growing))
            continue
        snap = snapshot(str(growing))
        with snap.source as src:
            block = src.read(0, snap.n_frames)
        assert (snap.n_frames, snap.finished, n_atoms) == (whole, False, 40)
        np.testing.assert_array_equal(block.positions, reference[:whole], err_msg=f"cut at byte {at}")


def test_a_frame_in_progress_whose_coordinates_look_like_a_frame_start(tmp_path):
    """Coordinates are any bytes: a TRR frame being written whose first position holds the first words of a
    TRR header (1993, 13) is the frame in progress. The scan for a file cut short takes those words for a
    frame after a damaged one; the scan for a growing file does not look for frames inside a frame."""
    rng = np.random.default_rng(7)
    fake = np.frombuffer(struct.pack(">ii", 1993, 13), ">f4").astype(np.float32)
    path = tmp_path / "growing.trr"
    with TRRFile(str(path), "w") as f:
        for i in range(3):
            xyz = rng.random((20, 3), dtype=np.float32)
            if i == 2:
                xyz[0, :2] = fake
            f.write(xyz, None, None, np.eye(3, dtype=np.float32) * 5, i, float(i), 0.0, 20)
    offsets = [int(o) for o in _xdr.scan_trr(str(path))[1]]
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 50])   # the writer is inside frame 2's positions, past the fake words
    with pytest.raises(_xdr.XDRFormatError, match="another TRR frame starts"):
        _xdr.scan_trr(str(path), partial_last=[])
    n_atoms, got, complete = _xdr.scan_growing(str(path), "TRR")
    assert (n_atoms, list(got), complete) == (20, offsets[:2], offsets[2])


@pytest.mark.parametrize("fmt", ["xtc", "trr"])
def test_damage_in_a_growing_file_is_still_refused(tmp_path, fmt):
    """Bytes after the last whole frame that start no frame, or a frame before it whose second word is
    wrong (an XTC's atom count, a TRR's version string length), are damage: one error naming the frame
    and its byte."""
    full = tmp_path / f"full.{fmt}"
    _write_with_mdanalysis(full)
    _, ends = _mdanalysis_frames(full)
    data = full.read_bytes()
    junk = tmp_path / f"junk.{fmt}"
    junk.write_bytes(data + b"\x00\x00\x08")   # not the first bytes of a magic number
    said = f"frame 4 at byte {len(data)}: the 3 bytes after the last whole frame do not start"
    with pytest.raises(_xdr.XDRFormatError, match=said):
        _xdr.scan_growing(str(junk), fmt.upper())
    bad = bytearray(data)
    bad[ends[0] + 4:ends[0] + 8] = struct.pack(">i", 1234)
    junk.write_bytes(bytes(bad[:-10]))
    with pytest.raises(_xdr.XDRFormatError, match=f"frame 1 at byte {ends[0]}"):
        _xdr.scan_growing(str(junk), fmt.upper())


def test_a_file_backed_up_right_after_its_scan_is_looked_at_again(tmp_path, monkeypatch):
    """``gmx mdrun`` starting a new run renames the file (``#traj.xtc.1#``) before it writes its successor: a
    look whose scan found the file, and whose next step finds no file, is "look again" (InputFileError), which
    the follower takes as no news, not a traceback."""
    traj = tmp_path / "traj.xtc"
    _write_with_mdanalysis(traj, n_frames=3)
    scan = _xdr.scan_growing

    def scan_then_backed_up(path, fmt):
        found = scan(path, fmt)
        Path(path).rename(tmp_path / "#traj.xtc.1#")   # the writer, between this look's two steps
        return found

    monkeypatch.setattr(_xdr, "scan_growing", scan_then_backed_up)
    with pytest.raises(InputFileError, match="moved or removed while it was read"):
        snapshot(str(traj))


@pytest.mark.cli
def test_xtc_written_by_mdanalysis_while_followed_equals_the_finished_file(tmp_path):
    """MDAnalysis's XTCWriter in another process, a frame every 20 ms, then ``TRAJ.done``; it holds after
    10 frames until the follower has published its first round (so the frames come in several rounds)."""
    out, go = tmp_path / "growing.xtc", tmp_path / "go"
    writer = producer("mdaxtc", str(out), "0.02", hold=go)
    try:
        r = ts.run(ts.RMSD(select="name CA"), PSF, str(out),
                   follow=FollowOptions(idle=120, poll=0.05, wait=120, every_frames=1),
                   on_update=lambda res: go.touch())
    finally:
        go.touch()
        assert writer.wait(timeout=300) == 0
    assert r.report.meta.follow.ended == "complete", last_line(r)
    assert len(r.report.tasks) > 1   # the frames came in more than one round
    full = ts.run(ts.RMSD(select="name CA"), PSF, str(out))
    assert len(r.rmsd) == 98 and np.array_equal(r.rmsd, full.rmsd)
    ref = rms.RMSD(mda.Universe(PSF, str(out)).select_atoms("name CA")).run().results.rmsd[:, 2]
    np.testing.assert_allclose(r.rmsd, ref, rtol=1e-5, atol=1e-5)
