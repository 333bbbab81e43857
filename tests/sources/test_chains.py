"""Trajectories in many XTC/TRR/DCD parts, read in place (issue 14, "the formats users already have").

References are MDAnalysis's own readers: the unsplit file, or its ChainReader over the parts.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysis.lib.formats.libmdaxdr import XTCFile
from MDAnalysisTests import datafiles as D

import trajscale as ts
from tests.conftest import run_cli_here, run_mpi
from trajscale.errors import AtomCountMismatchError, InputFileError
from trajscale.executors.processes import ProcessExecutor
from trajscale.sources import MDAPartSource, SegmentedSource, XDRSource, open_source, source_from_config
from trajscale.testing import SourceConformance

HERE = Path(__file__).parent


def _write_parts(universe, folder: Path, bounds, suffix: str, restarted: bool = False) -> list[str]:
    """The universe's frames ``[a, b)`` per part, written by MDAnalysis's own writer.

    ``restarted`` (DCD): each part's header starts at its first frame (``istart``), as a restarted run
    writes it, so times continue across parts (a DCD's times otherwise restart at 0 in every part).
    """
    parts = []
    for k, (a, b) in enumerate(bounds):
        p = folder / f"traj.part{k + 1:04d}.{suffix}"
        kw = {"istart": a, "nsavc": 1, "dt": universe.trajectory.dt} if restarted else {}
        with mda.Writer(str(p), universe.atoms.n_atoms, **kw) as w:
            for _ in universe.trajectory[a:b]:
                w.write(universe.atoms)
        parts.append(str(p))
    return parts


@pytest.fixture(scope="module")
def xtc_parts(tmp_path_factory):
    return _write_parts(mda.Universe(D.GRO, D.XTC), tmp_path_factory.mktemp("xtc"), [(0, 4), (4, 7), (7, 10)], "xtc")


@pytest.fixture(scope="module")
def trr_parts(tmp_path_factory):
    return _write_parts(mda.Universe(D.GRO, D.TRR), tmp_path_factory.mktemp("trr"), [(0, 5), (5, 10)], "trr")


@pytest.fixture(scope="module")
def dcd_parts(tmp_path_factory):
    return _write_parts(mda.Universe(D.PSF, D.DCD), tmp_path_factory.mktemp("dcd"),
                        [(0, 25), (25, 50), (50, 74), (74, 98)], "dcd", restarted=True)


def _long_chain(folder: Path, n_parts: int, per_part: int) -> list[str]:
    """AdK in water, frame ``i`` = the XTC's frame ``i % 10``, ``per_part`` frames per part (GROMACS -noappend)."""
    folder.mkdir(parents=True, exist_ok=True)
    with XTCFile(D.XTC) as f:
        frames = [(fr.x.copy(), fr.box.copy()) for fr in f]
    parts = []
    for k in range(n_parts):
        p = folder / f"traj.part{k + 1:04d}.xtc"
        with XTCFile(str(p), "w") as w:
            for i in range(k * per_part, (k + 1) * per_part):
                x, box = frames[i % len(frames)]
                w.write(x, box, i, 10.0 * i, 1000.0)
        parts.append(str(p))
    return parts


@pytest.fixture(scope="module")
def water_rmsd():
    """MDAnalysis's CA RMSD (superposed on frame 0) over the unsplit 10-frame XTC."""
    return rms.RMSD(mda.Universe(D.GRO, D.XTC), select="name CA").run().results.rmsd[:, 2]


def _listing(folder) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in Path(folder).iterdir()}


# ------------------------------------------------------------------ conformance


class TestChainXTC(SourceConformance):
    """Three XTC parts as one trajectory, against MDAnalysis on the unsplit XTC."""

    n_cases = 2

    @pytest.fixture
    def make_source(self, xtc_parts):
        return lambda: SegmentedSource.from_parts(xtc_parts)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.GRO, D.XTC)


class TestChainXTCOnAWorker(SourceConformance):
    """The source a worker builds from the shipped config (offsets travel; nothing is scanned there)."""

    n_cases = 2

    @pytest.fixture
    def make_source(self, xtc_parts):
        cfg = json.loads(json.dumps(SegmentedSource.from_parts(xtc_parts).get_config()))
        return lambda: source_from_config(cfg)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.GRO, D.XTC)


class TestChainTRR(SourceConformance):
    """Two TRR parts (positions and velocities), against MDAnalysis on the unsplit TRR."""

    n_cases = 2

    @pytest.fixture
    def make_source(self, trr_parts):
        return lambda: SegmentedSource.from_parts(trr_parts)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.GRO, D.TRR)


class TestChainDCD(SourceConformance):
    """Four DCD parts (MDAnalysis's DCD reader per part), against MDAnalysis's ChainReader over them."""

    @pytest.fixture
    def make_source(self, dcd_parts):
        return lambda: SegmentedSource.from_parts(dcd_parts)

    @pytest.fixture
    def universe(self, dcd_parts):
        return mda.Universe(D.PSF, dcd_parts)


class TestPartXTC(SourceConformance):
    """One XTC read through libmdaxdr with its offsets, against MDAnalysis's XTCReader."""

    n_cases = 2

    @pytest.fixture
    def make_source(self):
        return lambda: XDRSource(D.XTC)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.GRO, D.XTC)


# ------------------------------------------------------------------ what is opened, and when


def test_open_source_reads_parts_in_place(xtc_parts):
    with open_source(xtc_parts, D.GRO) as src:
        assert isinstance(src, SegmentedSource) and src.n_frames == 10 and src.chunk_frames == 1
    with open_source(D.XTC, D.GRO) as src:
        assert isinstance(src, XDRSource) and src.get_config()["offsets"]
    with open_source(D.DCD, D.PSF) as src:   # one DCD: MDAnalysis's reader for the file alone, no Universe
        assert isinstance(src, MDAPartSource) and src.format == "DCD"


def test_a_worker_opens_a_part_only_when_it_reads_it(xtc_parts):
    cfg = SegmentedSource.from_parts(xtc_parts).get_config()
    assert all(seg["offsets"] for seg in cfg["segments"]), "offsets are scanned by the preparing process"
    with source_from_config(cfg) as src:
        assert src.opens == 0 and src.n_frames == 10 and src.fields == ("position",)
        src.read(5, 7)                                     # frames of the second part only
        assert src.opens == 1 and list(src._open) == [1]


def test_shipped_offsets_are_what_a_worker_seeks_by(xtc_parts):
    """Offsets in the config are used as they are (not rebuilt): swapping two frames' offsets swaps the frames."""
    cfg = SegmentedSource.from_parts(xtc_parts).get_config()
    from trajscale.xdr.source import decode_offsets, encode_offsets

    offsets = decode_offsets(cfg["segments"][0]["offsets"])
    cfg["segments"][0]["offsets"] = encode_offsets(offsets[[0, 2, 1, 3]])   # (frame 0 is always at byte 0)
    u = mda.Universe(D.GRO, D.XTC)
    with source_from_config(cfg) as src:
        second, third = (src.read(k, k + 1, np.arange(100)).positions[0] for k in (1, 2))
    np.testing.assert_allclose(second, u.trajectory[2].positions[:100], atol=1e-4)
    np.testing.assert_allclose(third, u.trajectory[1].positions[:100], atol=1e-4)


def test_runs_write_no_offset_cache_files(xtc_parts, tmp_path, water_rmsd):
    """Serial and processes(2) over a chain: equal to MDAnalysis, and nothing written beside the parts
    (MDAnalysis's XTC reader writes ``.NAME_offsets.npz`` and a lock file for each part it opens)."""
    parts = [shutil.copy(p, tmp_path) for p in xtc_parts]
    before = _listing(tmp_path)
    for ex in ("serial", "processes"):
        r = ts.run(ts.RMSD(select="name CA"), D.GRO, parts, executor=ex, n_workers=2)
        np.testing.assert_allclose(r.rmsd, water_rmsd, atol=1e-4)
    assert _listing(tmp_path) == before


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_each_worker_process_holds_only_the_parts_of_its_tasks(tmp_path, water_rmsd):
    """processes(2), 10 parts: the files each worker has open (from /proc, not our counters) are the
    parts its tasks cover, and every part is opened by exactly one worker."""
    parts = _long_chain(tmp_path / "chain", 10, 2)
    ex = ProcessExecutor(2)
    try:
        r = ts.run(ts.RMSD(select="name CA"), D.GRO, parts, executor=ex, n_tasks=4)
        np.testing.assert_allclose(r.rmsd, np.tile(water_rmsd, 2), atol=1e-4)
        tasks = r.report.tasks
        held_by = {}
        for pid in {t.pid for t in tasks}:
            fds = Path(f"/proc/{pid}/fd")
            held = {os.path.realpath(fd) for fd in fds.iterdir() if os.path.exists(fd)}
            mine = [t for t in tasks if t.pid == pid]
            expected = {os.path.realpath(parts[k]) for t in mine for k in range(t.start // 2, -(-t.stop // 2))}
            assert held & set(map(os.path.realpath, parts)) == expected
            assert sum(t.files_opened for t in mine) == len(expected)
            held_by[pid] = expected
        assert len(tasks) == 4 and all(t.stop - t.start in (4, 6) for t in tasks)   # whole parts per task
        assert sum(len(v) for v in held_by.values()) == len(parts)
    finally:
        ex.close()
    assert not [p for p in os.listdir(tmp_path / "chain") if "offsets" in p or "lock" in p]


@pytest.mark.mpi
def test_mpi_ranks_open_only_their_parts(tmp_path, water_rmsd):
    """``mpiexec -n 2``: each rank opens only the parts of its frames; no offset caches are written."""
    parts = _long_chain(tmp_path / "chain", 8, 2)
    out = tmp_path / "out.json"
    proc = run_mpi(2, [str(HERE / "mpi_chain_script.py"), D.GRO, str(out), *parts])
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    np.testing.assert_allclose(got["rmsd"], np.tile(water_rmsd, 2)[:16], atol=1e-4)
    by_rank: dict[str, list] = {}
    for t in got["tasks"]:
        by_rank.setdefault(t["worker"], []).append(t)
    assert len(by_rank) == 2
    for tasks in by_rank.values():
        covered = {k for t in tasks for k in range(t["start"] // 2, -(-t["stop"] // 2))}
        assert sum(t["files_opened"] for t in tasks) == len(covered) < len(parts)
    assert sorted(os.listdir(tmp_path / "chain")) == sorted(Path(p).name for p in parts)


def test_auto_costs_the_decoding_of_whole_frames(tmp_path, monkeypatch):
    """XTC decodes every atom of a frame, whatever is selected: 100 frames of 47,681 atoms (~0.4 s) are
    worth two workers that start in 0.1 s, though the 214 CA atoms read would not be."""
    from trajscale import executors
    from trajscale.engine import prepare
    from trajscale.executors import choose_executor
    from trajscale.run import RunOptions

    for method in ("forkserver", "spawn"):   # the start cost the estimate is compared with (auto's pool never forks)
        monkeypatch.setitem(executors.START_COST_S, method, 0.1)
    parts = _long_chain(tmp_path / "chain", 10, 10)
    _, facts = prepare(ts.RMSD(select="name CA"), D.GRO, parts, RunOptions())
    assert facts.n_atoms == 214 and facts.decode_s_per_frame > 1e-3
    assert choose_executor(facts, 2)[0] == "processes"
    _, few = prepare(ts.RMSD(select="name CA"), D.GRO, parts[:1], RunOptions())
    assert choose_executor(few, 2)[0] == "serial"   # 10 frames: not worth starting workers


# ------------------------------------------------------------------ bad input


def test_parts_with_other_atom_counts_are_one_clear_error(xtc_parts, dcd_parts):
    with pytest.raises(AtomCountMismatchError, match="atoms but"):
        open_source([xtc_parts[0], dcd_parts[0]], D.GRO)


def test_a_damaged_part_is_named_in_one_clear_error(xtc_parts, tmp_path):
    """The CLI over a chain whose middle part is cut short, or is not an XTC: one line naming that part."""
    from tests.cli._helpers import assert_clean_failure

    parts = [shutil.copy(p, tmp_path) for p in xtc_parts]
    with open(parts[1], "r+b") as fh:
        fh.truncate(os.path.getsize(parts[1]) // 2)
    assert_clean_failure(run_cli_here("run", "rmsd", D.GRO, *parts, "--no-progress", "--strict"), "traj.part0002.xtc")
    Path(parts[1]).write_bytes(b"not an XTC file")
    assert_clean_failure(run_cli_here("run", "rmsd", D.GRO, *parts, "--no-progress"), "traj.part0002.xtc", "XTC")


def test_a_part_gone_after_the_job_was_prepared_is_named(xtc_parts, tmp_path):
    parts = [shutil.copy(p, tmp_path) for p in xtc_parts]
    cfg = SegmentedSource.from_parts(parts).get_config()
    os.remove(parts[2])
    with source_from_config(cfg) as src:
        src.read(0, 4)
        with pytest.raises(InputFileError, match=r"traj\.part0003\.xtc.*missing"):
            src.read(8, 10)


if __name__ == "__main__":   # pragma: no cover
    sys.exit(pytest.main([__file__]))
