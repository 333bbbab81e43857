"""Segmented trajectories: split, index, the SegmentedSource (conformance, lazy opens), runs over segments."""

from __future__ import annotations

import shutil
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

import trajscale as ts
from tests.conftest import run_cli_here
from trajscale.block import split_frames
from trajscale.convert.convert import convert
from trajscale.convert.split import build_index, split
from trajscale.errors import TrajscaleError
from trajscale.executors.mpi import rank_tasks
from trajscale.sources import SegmentedSource, index_path, open_source
from trajscale.storage.location import Location
from trajscale.testing import SourceConformance


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory, adk_vacuum_h5md):
    out = tmp_path_factory.mktemp("seg") / "parts"
    split(adk_vacuum_h5md, out, 4)
    return out


@pytest.fixture(scope="module")
def xtc_parts(tmp_path_factory):
    """The AdK-in-water XTC (10 frames) as three parts, as GROMACS -noappend leaves them."""
    d = tmp_path_factory.mktemp("xtc")
    u = mda.Universe(D.GRO, D.XTC)
    parts = []
    for k, (a, b) in enumerate([(0, 4), (4, 7), (7, 10)]):
        p = d / f"traj.part{k + 1:04d}.xtc"
        with mda.Writer(str(p), u.atoms.n_atoms) as w:
            for _ in u.trajectory[a:b]:
                w.write(u.atoms)
        parts.append(str(p))
    return parts


class TestSegmentedH5MD(SourceConformance):
    """The PSF/DCD trajectory split into 4 H5MD segments, against MDAnalysis on the original DCD."""

    @pytest.fixture
    def make_source(self, split_dir):
        return lambda: SegmentedSource(split_dir)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.PSF, D.DCD)


class TestSegmentedXTC(SourceConformance):
    """Three XTC parts through an index file, against MDAnalysis on the unsplit XTC."""

    n_cases = 2

    @pytest.fixture
    def make_source(self, xtc_parts, tmp_path):
        index = build_index(xtc_parts, tmp_path / "traj.index.json", topology=D.GRO)
        return lambda: SegmentedSource(index)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.GRO, D.XTC)


def test_split_writes_parts_and_index(split_dir):
    parts = sorted(p.name for p in Path(split_dir).iterdir())
    assert parts == ["index.json", "part_000.h5md", "part_001.h5md", "part_002.h5md", "part_003.h5md"]
    for p in Path(split_dir).glob("part_*.h5md"):   # every part is H5MD that MDAnalysis reads on its own
        assert mda.Universe(D.PSF, str(p)).trajectory.n_frames in (24, 25)


def test_opens_only_what_it_reads_and_at_most_max_open(split_dir):
    with SegmentedSource(split_dir, max_open=2) as src:
        src.read(0, 10)
        assert src.opens == 1
        src.read(20, 80)                      # touches segments 0-3: at most 2 stay open
        assert src._open.most_open <= 2 and len(src._open) <= 2
        assert src.opens == 4


@pytest.mark.parametrize("n_ranks", [2, 3])
def test_each_rank_opens_only_its_own_segments(split_dir, n_ranks):
    """The MPI executor's split (contiguous task groups per rank): a rank opens only the parts of its frames."""
    with SegmentedSource(split_dir) as probe:
        n, starts = probe.n_frames, [s["start"] for s in probe.segments] + [probe.n_frames]
    ranges = split_frames(n, 2 * n_ranks)
    for rank in range(n_ranks):
        mine = [ranges[i] for i in rank_tasks(len(ranges), n_ranks, rank)]
        with SegmentedSource(split_dir) as src:
            for r in mine:
                src.read(r.start, r.stop)
            lo, hi = mine[0].start, mine[-1].stop
            needed = sum(1 for k in range(len(starts) - 1) if starts[k] < hi and starts[k + 1] > lo)
            assert src.opens == needed < 4 or n_ranks == 1


def test_rmsd_over_segments_equals_mdanalysis(split_dir, xtc_parts, tmp_path):
    ref = rms.RMSD(mda.Universe(D.PSF, D.DCD), select="name CA").run().results.rmsd[:, 2]
    r = ts.run(ts.RMSD(select="name CA"), D.PSF, str(split_dir), executor="processes", n_workers=2)
    np.testing.assert_allclose(r.rmsd, ref, atol=1e-4)
    index = build_index(xtc_parts, tmp_path / "x.index.json", topology=D.GRO)
    ref = rms.RMSD(mda.Universe(D.GRO, D.XTC), select="name CA").run().results.rmsd[:, 2]
    np.testing.assert_allclose(ts.run(ts.RMSD(select="name CA"), D.GRO, index, n_tasks=3).rmsd, ref, atol=1e-4)


def test_an_index_is_the_file_given_whatever_its_name(xtc_parts, tmp_path):
    """A segment index is the file given (as an object behind a URL is), whatever its name ends with."""
    index = build_index(xtc_parts, tmp_path / "traj.index.json", topology=D.GRO)
    other = tmp_path / "traj.parts"
    shutil.copy(index, other)
    frames = mda.Universe(D.GRO, D.XTC).trajectory.n_frames
    with SegmentedSource(str(other)) as src:
        assert src.n_frames == frames
    assert index_path(Location(other)).where == str(other) and index_path(Location(tmp_path / "none")) is None


def test_bad_parts_are_one_clear_error(xtc_parts, adk_vacuum_h5md, tmp_path):
    with pytest.raises(TrajscaleError, match="out of order"):
        build_index([xtc_parts[1], xtc_parts[2], xtc_parts[0]], tmp_path / "a.json", topology=D.GRO)
    with pytest.raises(TrajscaleError, match="out of order"):
        build_index([xtc_parts[0], xtc_parts[2], xtc_parts[1]], tmp_path / "b.json", topology=D.GRO)
    with pytest.raises(TrajscaleError, match="no such part"):
        build_index([xtc_parts[0], str(tmp_path / "gone.xtc")], tmp_path / "c.json", topology=D.GRO)
    water = tmp_path / "w.h5md"
    convert(D.GRO, [D.XTC], str(water))
    with pytest.raises(TrajscaleError, match="atoms"):
        build_index([adk_vacuum_h5md, str(water)], tmp_path / "d.json")
    assert not any((tmp_path / n).exists() for n in ("a.json", "b.json", "c.json", "d.json"))


def test_missing_segment_named_when_read(tmp_path, adk_vacuum_h5md):
    out = tmp_path / "p"
    split(adk_vacuum_h5md, out, 3)
    (out / "part_001.h5md").unlink()
    with open_source(str(out)) as src:
        src.read(0, 5)
        with pytest.raises(TrajscaleError, match="part_001.h5md.*missing"):
            src.read(30, 60)


@pytest.mark.cli
def test_no_output_is_a_part_of_an_input_index(split_dir, adk_vacuum):
    """An output is refused when it is a part a segment index names, the index given by its file or folder, even
    with --overwrite; the parts are the index's own (parsed by the segments module, not guessed from names)."""
    from trajscale.sources import with_parts

    index = split_dir / "index.json"
    parts = sorted(str(p) for p in split_dir.glob("part_*.h5md"))
    assert len(parts) == 4
    assert sorted(with_parts([str(index)])[1:]) == sorted(with_parts([str(split_dir)])[1:]) == parts
    assert with_parts([None, adk_vacuum[0]]) == [None, adk_vacuum[0]]   # (no index: nothing added)
    for given in (index, split_dir):
        proc = run_cli_here("run", "rgyr", adk_vacuum[0], str(given), "--select", "name CA", "--out", parts[2],
                            "--overwrite")
        assert proc.returncode != 0 and "is the input" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_cli_split_then_run(tmp_path, adk_vacuum, adk_vacuum_h5md):
    proc = run_cli_here("split", adk_vacuum_h5md, "-o", str(tmp_path / "s"), "--parts", "3")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], str(tmp_path / "s"), "--select", "name CA", "--out",
                        str(tmp_path / "r.csv"))
    assert proc.returncode == 0, proc.stderr
    got = np.loadtxt(tmp_path / "r.csv", delimiter=",", skiprows=1)[:, 2]
    ref = rms.RMSD(mda.Universe(*adk_vacuum), select="name CA").run().results.rmsd[:, 2]
    np.testing.assert_allclose(got, ref, atol=1e-4)
    bad = run_cli_here("split", adk_vacuum_h5md, "-o", str(tmp_path / "s"), "--parts", "0")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
