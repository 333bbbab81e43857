"""A damaged part read by one MPI rank or one Dask worker ends the whole job: every rank and
worker exits, and the one error line names the file and the frames.

The chains: six XTC parts of the AdK trajectory (98 frames, 3341 atoms) whose fourth part has
a frame whose coordinate block claims 3342 atoms (its header says 3341: the offset scan, which
reads headers only, accepts it, and the rank that decodes it refuses it); and six H5MD segments
whose third has a gzip chunk overwritten (HDF5 cannot inflate it).
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from tests.conftest import run_cli, run_mpi
from trajscale.sources.segments import write_index
from trajscale.xdr.source import decode_offsets, scan_part

#: Seconds a failing job may take before it counts as hung: the ranks' or workers' start-up
#: (each imports MDAnalysis) on a loaded 2-core machine, plus the abort; a hang runs into it.
ABORT_S = 150
PART_FRAMES = 16


def _split(u) -> list[tuple[int, int]]:
    n = u.trajectory.n_frames
    return [(a, min(n, a + PART_FRAMES) if a + 2 * PART_FRAMES <= n else n)
            for a in range(0, n - PART_FRAMES, PART_FRAMES)]


@pytest.fixture(scope="module")
def bad_xtc_chain(tmp_path_factory, adk_vacuum):
    """(folder, part paths): part3.xtc's frame 5 has a coordinate block of 3342 atoms."""
    d = tmp_path_factory.mktemp("badxtc")
    u = mda.Universe(*adk_vacuum)
    parts = []
    for k, (a, b) in enumerate(_split(u)):
        parts.append(str(d / f"part{k}.xtc"))
        with mda.Writer(parts[-1], u.atoms.n_atoms) as w:
            for _ in u.trajectory[a:b]:
                w.write(u.atoms)
    bad = Path(parts[3])
    raw = bytearray(bad.read_bytes())
    at = int(decode_offsets(scan_part(str(bad))["offsets"])[5])
    # after magic, natoms, step, time (16 bytes) and the box (36): the coordinate block's atom count
    assert struct.unpack(">i", raw[at + 52:at + 56])[0] == u.atoms.n_atoms
    raw[at + 52:at + 56] = struct.pack(">i", u.atoms.n_atoms + 1)
    bad.write_bytes(bytes(raw))
    return d, parts


@pytest.fixture(scope="module")
def bad_h5md_segments(tmp_path_factory, adk_vacuum):
    """The folder of six gzip H5MD segments and their index; segment 2's second chunk is damaged."""
    d = tmp_path_factory.mktemp("badseg")
    u = mda.Universe(*adk_vacuum)
    segments = []
    for k, (a, b) in enumerate(_split(u)):
        pos = u.trajectory.timeseries(order="fac")[a:b] / 10   # nm
        path = d / f"seg{k}.h5md"
        with h5py.File(path, "w") as f:
            p = f.create_group("particles/all/position")
            p.create_dataset("value", data=pos, chunks=(4, pos.shape[1], 3), compression="gzip")
            p["value"].attrs["unit"] = "nm"
            p.create_dataset("step", data=np.arange(a, b))
            p.create_dataset("time", data=np.arange(a, b, dtype=np.float64))
            p["time"].attrs["unit"] = "ps"
        segments.append({"path": str(path), "start": a, "n_frames": b - a})
    with h5py.File(d / "seg2.h5md", "r") as f:
        info = f["particles/all/position/value"].id.get_chunk_info(1)   # frames 4-7 of the segment
    with open(d / "seg2.h5md", "r+b") as fh:
        fh.seek(info.byte_offset + 16)
        fh.write(b"\xff" * 64)
    write_index(d / "index.json", segments, u.atoms.n_atoms)
    return d


def _assert_ended(proc, started: float, *needles: str) -> None:
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert time.monotonic() - started < ABORT_S
    for needle in needles:
        assert needle in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.mpi
def test_mpi_bad_xtc_part_ends_every_rank(tmp_path, adk_vacuum, bad_xtc_chain):
    pytest.importorskip("mpi4py")
    _, parts = bad_xtc_chain
    started = time.monotonic()
    proc = run_mpi(3, ["-m", "trajscale.cli.main", "run", "rmsd", adk_vacuum[0], *parts, "--executor", "mpi",
                       "--out", "x.csv"], cwd=tmp_path, timeout=ABORT_S)
    _assert_ended(proc, started, "part3.xtc", "frame 5")
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.mpi
def test_mpi_damaged_h5md_segment_ends_every_rank(tmp_path, adk_vacuum, bad_h5md_segments):
    pytest.importorskip("mpi4py")
    started = time.monotonic()
    proc = run_mpi(3, ["-m", "trajscale.cli.main", "run", "rmsd", adk_vacuum[0],
                       str(bad_h5md_segments / "index.json"), "--executor", "mpi", "--out", "x.csv"],
                   cwd=tmp_path, timeout=ABORT_S)
    # segment 2 holds global frames 32-47; its damaged chunk, the segment's frames 4-7
    _assert_ended(proc, started, "seg2.h5md", "frame 4 ", "damaged")
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.cli
def test_dask_bad_xtc_part_ends_the_run(tmp_path, adk_vacuum, bad_xtc_chain):
    pytest.importorskip("distributed")
    _, parts = bad_xtc_chain
    started = time.monotonic()
    proc = run_cli("run", "rmsd", adk_vacuum[0], *parts, "--executor", "dask", "-n", "2", "--out", "x.csv",
                   cwd=tmp_path, timeout=ABORT_S)
    _assert_ended(proc, started, "part3.xtc", "frame 5")
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_dask_damaged_h5md_segment_ends_the_run(tmp_path, adk_vacuum, bad_h5md_segments):
    pytest.importorskip("distributed")
    started = time.monotonic()
    proc = run_cli("run", "rmsd", adk_vacuum[0], str(bad_h5md_segments / "index.json"), "--executor", "dask",
                   "-n", "2", "--out", "x.csv", cwd=tmp_path, timeout=ABORT_S)
    _assert_ended(proc, started, "seg2.h5md", "frame 4 ", "damaged")
    assert not (tmp_path / "x.csv").exists()
