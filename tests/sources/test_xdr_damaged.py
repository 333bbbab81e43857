"""Damaged XTC files keep their whole frames: the frames before the damage are read, with a warning that
names the frame and the byte, and ``--strict`` refuses the file.

Copies of MDAnalysisTests' adk_oplsaa.xtc (10 frames of 47,681 atoms), damaged in a tmp dir as files
are damaged in the wild: 200 kB of zeros after frame 9 (a disk that filled up, a copy that went on
with zeros), and frame 5's magic number zeroed. The reference is MDAnalysis's XTCReader reading the
same damaged copy: its frames before the damage, positions equal to the bit.
"""

from __future__ import annotations

import logging
import re
import shutil
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from trajscale.errors import InputFileError
from trajscale.sources import open_source
from trajscale.xdr.source import XDRSource, refuse_partial_frames

ROOT = Path(__file__).resolve().parents[2]
TROUBLESHOOTING = ROOT / "docs" / "troubleshooting.md"


def mda_offsets(path: str) -> list[int]:
    """Frame offsets as MDAnalysis's XTC library finds them in the undamaged file (scanned, not its reader's
    ``.NAME_offsets.npz`` cache: ``refresh_offsets=True`` rewrites that cache without its lock, beside
    MDAnalysisTests' data that other tests read at the same time)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(path) as f:
        return [int(o) for o in f.offsets]


def mda_frames(path: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """MDAnalysis's XTCReader on the damaged copy: the positions and times of its first ``n`` frames."""
    import MDAnalysis as mda

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reader = mda.coordinates.XTC.XTCReader(str(path), refresh_offsets=True)
        frames, times = [], []
        for i in range(n):
            t = reader[i]
            frames.append(t.positions.copy())
            times.append(t.time)
        reader.close()
    return np.array(frames), np.array(times)


def damaged(folder: Path, how: str) -> tuple[Path, int, int]:
    """A damaged copy of adk_oplsaa.xtc: (path, whole frames before the damage, the damage's byte)."""
    data = Path(D.XTC).read_bytes()
    offsets = mda_offsets(D.XTC)
    path = folder / "md.xtc"
    if how == "zeros":
        path.write_bytes(data + bytes(200_000))
        return path, 10, len(data)
    copy = bytearray(data)
    copy[offsets[5]:offsets[5] + 4] = bytes(4)
    path.write_bytes(bytes(copy))
    return path, 5, offsets[5]


@pytest.mark.parametrize("how", ["zeros", "magic5"])
def test_whole_frames_before_the_damage_are_mdanalysis_frames(tmp_path, how, caplog):
    path, kept, at = damaged(tmp_path, how)
    with caplog.at_level(logging.WARNING, logger="trajscale"):
        with XDRSource(str(path)) as source:
            assert source.n_frames == kept
            block = source.read(0, kept)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1, said
    assert str(path) in said[0] and f"(frame {kept})" in said[0] and f"byte {at}" in said[0], said[0]
    positions, times = mda_frames(path, kept)
    np.testing.assert_array_equal(block.positions, positions)
    np.testing.assert_allclose(block.time, times, rtol=0, atol=1e-3)


@pytest.mark.parametrize("how", ["zeros", "magic5"])
def test_strict_refuses_naming_the_frame_and_byte(tmp_path, how):
    path, kept, at = damaged(tmp_path, how)
    want = rf"md\.xtc: .*no XTC frame at byte {at} \(frame {kept}\)"
    with pytest.raises(InputFileError, match=want):
        XDRSource(str(path), strict=True)
    with refuse_partial_frames(True), pytest.raises(InputFileError, match=want):
        open_source(str(path))


@pytest.mark.slow
def test_open_dataset_reads_the_frames_before_the_damage(tmp_path):
    import trajscale as ts

    path, kept, _ = damaged(tmp_path, "magic5")
    ds = ts.open_dataset(D.TPR, str(path), chunks={})
    assert ds.sizes["frame"] == kept
    positions, _ = mda_frames(path, kept)
    np.testing.assert_array_equal(ds.positions.values, positions)
    assert list(ds.time.values) == [0.0, 100.0, 200.0, 300.0, 400.0]


def test_the_scan_reads_any_file_like_object(tmp_path):
    """The offsets index is one scan over bytes, whatever holds them: a path or a file-like object."""
    import io

    from trajscale.xdr._xdr import XDRFormatError, scan_xtc

    path, kept, at = damaged(tmp_path, "zeros")
    data = path.read_bytes()
    with pytest.raises(XDRFormatError) as on_path:
        scan_xtc(str(path))
    with pytest.raises(XDRFormatError) as on_bytes:
        scan_xtc(io.BytesIO(data))
    assert str(on_path.value) == str(on_bytes.value)
    assert list(on_bytes.value.offsets) == mda_offsets(D.XTC) and on_bytes.value.complete_bytes == at
    whole = scan_xtc(io.BytesIO(data[:at]))
    np.testing.assert_array_equal(whole[1], mda_offsets(D.XTC))
    np.testing.assert_array_equal(whole[3], on_bytes.value.steps)
    from trajscale.xdr.source import decode_offsets, scan_part

    held = io.BytesIO(data)
    held.name = "s3://bucket/md.xtc"
    index = scan_part(held)
    assert index["path"] == "s3://bucket/md.xtc" and index["n_frames"] == kept and index["format"] == "XTC"
    np.testing.assert_array_equal(decode_offsets(index["offsets"]), mda_offsets(D.XTC))
    with pytest.raises(InputFileError, match=r"s3://bucket/md\.xtc: cannot be read as XTC: no XTC frame"):
        scan_part(held, strict=True)


def recipe() -> list[str]:
    """The salvage commands of docs/troubleshooting.md's "Damaged files", as written."""
    text = TROUBLESHOOTING.read_text()
    section = text[text.index("## Damaged files"):]
    section = section[:section.index("\n## ", 4)]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(blocks) == 1, blocks
    return [line for line in blocks[0].splitlines() if line.strip()]


@pytest.mark.cli
@pytest.mark.slow
def test_troubleshooting_salvage_recipe_runs_as_written(tmp_path):
    """The recipe's commands, run as written beside a damaged md.xtc and its topol.tpr: the RMSDs of the
    frames before the damage, and an H5MD of them that MDAnalysis reads as the XTC's frames."""
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms

    path, kept, at = damaged(tmp_path, "zeros")
    shutil.copyfile(D.TPR, tmp_path / "topol.tpr")
    commands = recipe()
    assert any(c.startswith("trajscale run ") for c in commands)
    assert any(c.startswith("trajscale convert ") for c in commands)
    env_path = str(Path(sys.executable).parent)
    for command in commands:
        proc = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                              env={"PATH": f"{env_path}:/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"),
                                   "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)})
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-2000:]}"
        assert "Traceback" not in proc.stderr, command
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(str(tmp_path / "topol.tpr"), str(path))
        ref = rms.RMSD(u, select="protein and name CA").run(stop=kept).results.rmsd
    got = np.loadtxt(tmp_path / "rmsd.csv", delimiter=",", skiprows=1, comments="#")
    assert got.shape[0] == kept
    np.testing.assert_allclose(got[:, -1], ref[:, 2], atol=1e-4)
    positions, _ = mda_frames(path, kept)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h5 = mda.Universe(str(tmp_path / "topol.tpr"), str(tmp_path / "md.h5md"))
        assert h5.trajectory.n_frames == kept
        for i, t in enumerate(h5.trajectory):
            np.testing.assert_allclose(t.positions, positions[i], rtol=0, atol=1e-4)


def test_a_damaged_part_before_another_is_refused_not_joined_across_its_hole(tmp_path):
    """Damage salvages the frames of a file read alone or last; a damaged part followed by another
    would join across the frames it lost (a hole no message shows), so the chain is refused naming it,
    by the run's parts and by convert's join alike, with no word of ``trajscale repair`` (an H5MD file's)."""
    from trajscale.sources.chain import plan_join
    from trajscale.sources.segments import SegmentedSource

    path, kept, _ = damaged(tmp_path, "magic5")
    later = tmp_path / "later.xtc"
    shutil.copy(D.XTC, later)
    with pytest.raises(InputFileError, match=r"md\.xtc.*damaged after frame 4.*parts after it") as refused:
        SegmentedSource.from_parts([str(path), str(later)])
    assert "repair" not in str(refused.value)   # (trajscale repair mends H5MD files, not XTC)
    with XDRSource(str(path)) as first, XDRSource(str(later)) as second:
        with pytest.raises(InputFileError, match=r"md\.xtc.*damaged after frame 4"):
            plan_join([first, second])
    with XDRSource(str(later)) as first, XDRSource(str(path)) as last:   # damaged last: salvaged
        assert plan_join([first, last]).n_frames == 10 + kept


def test_a_frames_box_is_read_from_its_header_alone(tmp_path):
    """What a run that needs a box checks before its first block: each XTC frame's box from the frame's header,
    MDAnalysis's box to the bit, and read with none of the frame's coordinates (a frame whose coordinates are
    damaged still gives its box; reading the frame refuses it)."""
    import MDAnalysis as mda

    src = XDRSource(D.XTC)
    u = mda.Universe(D.GRO, D.XTC)
    for i, ts in enumerate(u.trajectory):
        assert src.frame_header(i)[2].tobytes() == np.float32(ts.dimensions)[None].tobytes()
    data = bytearray(Path(D.XTC).read_bytes())
    data[56:60] = struct.pack(">f", -1.0)   # frame 0's precision, the first field after its box and atom count
    bad = tmp_path / "coordinates.xtc"
    bad.write_bytes(bytes(data))
    # (opened as a worker opens it, with the offsets of the file's scan: the decoder meets the damage)
    src = XDRSource(str(bad), offsets=XDRSource(D.XTC).get_config()["offsets"], n_atoms=src.n_atoms)
    assert src.frame_header(0)[2].tobytes() == np.float32(u.trajectory[0].dimensions)[None].tobytes()
    with pytest.raises(InputFileError, match="precision"):
        src.read(0, 1, np.zeros(1, np.intp))
