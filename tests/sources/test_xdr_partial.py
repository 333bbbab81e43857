"""A last XTC/TRR frame cut short (a simulation killed mid-write): its complete frames are read, with
one warning; ``strict`` refuses the file; damage before the last frame is refused either way."""

from __future__ import annotations

import logging
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("MDAnalysisTests")
from MDAnalysisTests.datafiles import GRO, TRR, XTC  # noqa: E402

from trajscale.errors import InputFileError  # noqa: E402
from trajscale.sources import open_source  # noqa: E402
from trajscale.xdr.source import XDRSource  # noqa: E402


def _offsets(path: str) -> list[int]:
    from trajscale.xdr._xdr import scan_trr, scan_xtc

    return [int(o) for o in (scan_xtc if path.endswith(".xtc") else scan_trr)(path)[1]]


def _cut(src: str, tmp: Path, into_last: int) -> tuple[Path, int, int]:
    """``src`` cut ``into_last`` bytes into its last frame: (file, frames kept, cut offset)."""
    offsets = _offsets(src)
    data = Path(src).read_bytes()
    out = tmp / ("cut" + Path(src).suffix)
    out.write_bytes(data[:offsets[-1] + into_last])
    return out, len(offsets) - 1, offsets[-1]


def _mda_frames(path: Path, fmt: str, field: str = "positions"):
    import MDAnalysis as mda

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reader = mda.coordinates.XTC.XTCReader(str(path)) if fmt == "XTC" else \
            mda.coordinates.TRR.TRRReader(str(path))
        frames = [getattr(ts, field).copy() for ts in reader]
        times = [ts.time for ts in reader]
        reader.close()
    return np.array(frames), np.array(times)


@pytest.mark.parametrize("src, fmt, into", [(XTC, "XTC", 1000), (XTC, "XTC", 10), (XTC, "XTC", 60),
                                            (TRR, "TRR", 5000), (TRR, "TRR", 40)])
def test_complete_frames_are_read_as_mdanalysis_reads_them(tmp_path, caplog, src, fmt, into):
    path, kept, at = _cut(src, tmp_path, into)
    with caplog.at_level(logging.WARNING, logger="trajscale"):
        with XDRSource(str(path)) as part:
            assert part.n_frames == kept
            block = part.read(0, part.n_frames)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1, said
    assert str(path) in said[0] and f"frame {kept} at byte {at}" in said[0] and f"{into} of its" in said[0]
    reference, times = _mda_frames(path, fmt)
    assert len(reference) == kept
    np.testing.assert_array_equal(block.positions, reference)
    np.testing.assert_array_equal(block.time, times)


@pytest.mark.parametrize("src", [XTC, TRR])
def test_strict_refuses_a_cut_short_last_frame(tmp_path, src):
    path, kept, at = _cut(src, tmp_path, 1000)
    with pytest.raises(InputFileError, match=rf"frame {kept} at byte {at} is cut short"):
        XDRSource(str(path), strict=True)
    with pytest.raises(InputFileError, match="cut short"):
        open_source(str(path), strict=True)
    assert open_source(str(path), strict=False).n_frames == kept


@pytest.mark.parametrize("src, how", [(XTC, "count"), (TRR, "lost")])
def test_damage_before_the_last_frame_keeps_the_whole_frames_and_strict_refuses(tmp_path, src, how, caplog):
    """An XTC byte count that sends frame 8 past the end of the file looks like a cut-short last
    frame; frame 9 after it shows it is damage. A TRR that lost bytes inside frame 4 has no frame
    header where frame 5 should start. The frames before the damage are read (with a warning that
    names it), and ``strict`` refuses the file, naming the frame and byte."""
    offsets = _offsets(src)
    data = bytearray(Path(src).read_bytes())
    if how == "count":
        data[offsets[8] + 88:offsets[8] + 92] = struct.pack(">i", 600_000)
        expect = f"frame 8 at byte {offsets[8]} is cut short .*another XTC frame starts at byte {offsets[9]}: damaged"
    else:
        data = data[:offsets[5] - 4000] + data[offsets[5]:]
        expect = f"frame 5 at byte {offsets[5]}: no TRR frame header .*damaged"
    path = tmp_path / ("damaged" + Path(src).suffix)
    path.write_bytes(bytes(data))
    with pytest.raises(InputFileError, match=expect):
        XDRSource(str(path), strict=True)
    kept = 8 if how == "count" else 5
    with caplog.at_level(logging.WARNING, logger="trajscale"):
        with XDRSource(str(path)) as source:
            block = source.read(0, source.n_frames)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and str(path) in said[0] and f"byte {offsets[kept]}" in said[0], said
    assert source.n_frames == kept
    reference, times = _mda_frames(Path(src), "XTC" if src == XTC else "TRR")
    np.testing.assert_array_equal(block.positions, reference[:kept])


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trajscale.cli.main", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


@pytest.mark.cli
def test_cli_reads_the_complete_frames_and_strict_refuses(tmp_path):
    path, kept, at = _cut(XTC, tmp_path, 2000)
    proc = _cli("inspect", str(path), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(warned) == 1 and str(path) in warned[0] and f"frame {kept}" in warned[0], proc.stderr
    assert f'"n_frames": {kept}' in proc.stdout
    out = tmp_path / "r.csv"
    proc = _cli("run", "rmsd", GRO, str(path), "--select", "name CA", "--out", str(out), "--no-progress",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = [ln for ln in out.read_text().splitlines() if ln and not ln.startswith("#")]
    assert len(rows) == kept + 1   # a header line and one row a frame
    for args in (("inspect", str(path), "--strict"),
                 ("run", "rmsd", GRO, str(path), "--out", str(tmp_path / "s.csv"), "--strict", "--no-progress"),
                 ("convert", GRO, str(path), "-o", str(tmp_path / "s.h5md"), "--strict", "--no-progress")):
        proc = _cli(*args, cwd=tmp_path)
        assert proc.returncode in (1, 2), (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and "cut short" in lines[0], proc.stderr
    assert not (tmp_path / "s.csv").exists() and not (tmp_path / "s.h5md").exists()


def test_a_lone_cut_short_frame_allocates_nothing_for_its_atom_count(tmp_path):
    """A fuzzer finding: a 23-byte XTC whose only frame is cut short and whose header claims
    2,113,929,216 atoms made XDRSource allocate a 23.6 GiB decode buffer (MemoryError). No complete
    frame vouches for that count, so the file reads as 0 frames and allocates nothing of its size."""
    import resource

    path = tmp_path / "lone.xtc"
    path.write_bytes(bytes.fromhex("000007cb7e000000000000" "07cb000000c6003a41000201"))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with XDRSource(str(path)) as src:
        assert src.n_frames == 0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024   # KiB: under 512 MiB
