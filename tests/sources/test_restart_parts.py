"""GROMACS restart parts (``gmx mdrun -noappend``) join as MDAnalysis's ``Universe(top, parts, continuous=True)``
joins them, in ``convert``, ``verify``, ``index`` and ``run``: each time once, the later part's frame kept.

The parts are AdK (PSF/DCD) frames written as XTC by MDAnalysis's XTCWriter; each part after the first
begins with the previous part's last frame (the same time, step) with its coordinates moved by 0.25 Å, so
that "the later part wins" shows in the coordinates.
"""

from __future__ import annotations

import json
import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.convert.convert import convert
from trajscale.errors import InputFileError

from ..conftest import run_cli_here

warnings.filterwarnings("ignore", module="MDAnalysis")


def write_parts(folder, bounds, name="traj"):
    """XTC parts of the PSF/DCD frames ``[a, b)`` per bound; a part's first frame moved by +0.25 Å."""
    u = mda.Universe(D.PSF, D.DCD)
    paths = []
    for k, (a, b) in enumerate(bounds):
        path = folder / f"{name}.part{k + 1:04d}.xtc"
        with mda.Writer(str(path), u.atoms.n_atoms) as w:
            for i, _ in enumerate(u.trajectory[a:b]):
                if k and i == 0:
                    u.atoms.positions = u.atoms.positions + np.float32(0.25)
                w.write(u.atoms)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """Three restart parts of 10 frames: 28 distinct times (1-28 ps)."""
    return write_parts(tmp_path_factory.mktemp("restart"), [(0, 10), (9, 19), (18, 28)])


def continuous(parts):
    """MDAnalysis's continuous chain: (positions, times, steps) of every frame."""
    u = mda.Universe(D.PSF, parts, continuous=True)
    pos, times = [], []
    for t in u.trajectory:
        pos.append(t.positions.copy())
        times.append(t.time)
    return np.array(pos), np.array(times)


def test_convert_joins_restart_parts_as_mdanalysis_continuous(parts, tmp_path):
    ref_pos, ref_t = continuous(parts)
    assert len(ref_t) == 28 and ref_t[-1] == pytest.approx(28.0, abs=1e-4)
    out = tmp_path / "joined.h5md"
    s = convert(D.PSF, parts, str(out))
    assert (s.n_frames, s.frames_dropped, s.files_renumbered) == (28, 2, 0)
    got = mda.Universe(D.PSF, str(out))   # MDAnalysis reads the output
    assert got.trajectory.n_frames == 28
    np.testing.assert_allclose([t.time for t in got.trajectory], ref_t, rtol=0, atol=1e-5)   # not shifted
    np.testing.assert_allclose(np.array([t.positions.copy() for t in got.trajectory]), ref_pos, rtol=0, atol=1e-5)
    # the later part's copy of 10 ps (moved by 0.25 Å) is the one kept
    first_of_two = mda.Universe(D.PSF, parts[1]).trajectory[0].positions
    np.testing.assert_allclose(got.trajectory[9].positions, first_of_two, atol=1e-5)
    with h5py.File(out) as f:   # steps as stored in the parts, not renumbered
        np.testing.assert_array_equal(f["particles/all/position/step"][()], np.arange(1, 29))


def test_verify_joins_parts_and_passes_an_independent_join(parts, tmp_path):
    """An H5MD file of MDAnalysis's continuous chain (written by MDAnalysis, one XTC) verifies against the parts."""
    u = mda.Universe(D.PSF, parts, continuous=True)
    single = tmp_path / "mda_joined.xtc"
    with mda.Writer(str(single), u.atoms.n_atoms) as w:
        for _ in u.trajectory:
            w.write(u.atoms)
    h5 = tmp_path / "mda_joined.h5md"
    convert(D.PSF, [str(single)], str(h5))
    r = run_cli_here("verify", D.PSF, *parts, str(h5), "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "28 frames" in r.stdout and "OK" in r.stdout


@pytest.mark.parametrize("via", ["index", "parts"])
def test_run_rmsd_over_restart_parts_equals_mdanalysis_continuous(parts, tmp_path, via):
    ref_u = mda.Universe(D.PSF, parts, continuous=True)
    ref = rms.RMSD(ref_u, select="name CA").run().results.rmsd
    if via == "index":
        r = run_cli_here("index", *parts, "-o", str(tmp_path / "parts.json"), "--topology", D.PSF)
        assert r.returncode == 0, r.stderr
        index = json.loads((tmp_path / "parts.json").read_text())
        assert [s["n_frames"] for s in index["segments"]] == [9, 9, 10]
        traj = str(tmp_path / "parts.json")
    else:
        traj = parts
    got = ts.run(ts.RMSD(select="name CA"), D.PSF, traj, n_tasks=3)
    assert len(got.rmsd) == 28
    np.testing.assert_allclose(got.times, continuous(parts)[1], atol=1e-5)   # (ChainReader.time counts from 0)
    np.testing.assert_allclose(got.rmsd, ref[:, 2], atol=1e-4)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_overlapping_part_is_refused_naming_both_and_joins_with_continuous(tmp_path):
    """A part starting 4 frames before the previous part's end: refused; --continuous: the later part wins."""
    over = write_parts(tmp_path, [(0, 10), (6, 16)], name="over")
    out = tmp_path / "o.h5md"
    r = run_cli_here("convert", D.PSF, *over, "-o", str(out), "--no-progress")
    assert r.returncode != 0 and not out.exists()
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "over.part0002.xtc" in r.stderr and "over.part0001.xtc" in r.stderr
    assert "starts at 7 ps" in r.stderr and "(10 ps)" in r.stderr and "--continuous" in r.stderr
    with pytest.raises(InputFileError, match="overlap"):
        ts.run(ts.RMSD(select="name CA"), D.PSF, over)

    r = run_cli_here("convert", D.PSF, *over, "-o", str(out), "--no-progress", "--continuous")
    assert r.returncode == 0, r.stderr
    ref_pos, ref_t = continuous(over)
    assert len(ref_t) == 16
    got = mda.Universe(D.PSF, str(out))
    np.testing.assert_allclose([t.time for t in got.trajectory], ref_t, atol=1e-5)
    np.testing.assert_allclose(np.array([t.positions.copy() for t in got.trajectory]), ref_pos, atol=1e-5)
    ref = rms.RMSD(mda.Universe(D.PSF, over, continuous=True), select="name CA").run().results.rmsd[:, 2]
    np.testing.assert_allclose(ts.run(ts.RMSD(select="name CA"), D.PSF, over, continuous=True).rmsd, ref,
                               atol=1e-4)


def test_whole_repeats_are_renumbered_and_the_message_counts_frames_and_parts(parts, tmp_path):
    """The demo's way: one file given three times. Renumbered, as before, and the warning says how many."""
    out = tmp_path / "three.h5md"
    r = run_cli_here("convert", D.PSF, parts[0], parts[0], parts[0], "-o", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "renumbered step and time of 20 frame(s) in 2 part(s)" in r.stderr, r.stderr
    with h5py.File(out) as f:
        t = f["particles/all/position/time"][()]
        step = f["particles/all/position/step"][()]
    np.testing.assert_allclose(t, np.arange(1, 31), atol=1e-4)   # continuing with the file's own 1 ps spacing
    np.testing.assert_array_equal(step, np.arange(1, 31))


def test_xtc_step_and_time_read_from_frame_headers_equal_mdanalysis():
    """Joining reads a few frames' step/time per part; from an XTC they come from the frame headers."""
    from trajscale.sources import XDRSource

    u = mda.Universe(D.GRO, D.XTC)
    with XDRSource(D.XTC) as src:
        got = [src.frame_header(i)[:2] for i in range(src.n_frames)]
    assert got == [(t.data["step"], t.time) for t in u.trajectory]


def test_a_part_whose_step_counter_alone_restarts_is_said_so(tmp_path):
    """A second part whose times go on but whose steps start again from 0 (a run continued with a new step
    counter): the steps are renumbered, the times kept, and the notice says that only the steps changed."""
    u = mda.Universe(D.PSF, D.DCD)
    paths = []
    for k, frames in enumerate([range(0, 10), range(10, 20)]):
        paths.append(str(tmp_path / f"part{k}.xtc"))
        with mda.Writer(paths[-1], u.atoms.n_atoms) as w:
            for j, fr in enumerate(frames):
                u.trajectory[fr]
                u.trajectory.ts.data["step"] = j   # (the counter restarts; the times, 1 ps apart, go on)
                w.write(u.atoms)
    out = tmp_path / "joined.h5md"
    r = run_cli_here("convert", D.PSF, *paths, "-o", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "renumbered the step of 10 frame(s) in 1 part(s) whose step counter restarts" in r.stderr, r.stderr
    assert "their times are kept" in r.stderr and "step and time" not in r.stderr
    with h5py.File(out) as f:
        t = f["particles/all/position/time"][()]
        step = f["particles/all/position/step"][()]
    times = [ts_.time for ts_ in mda.Universe(D.PSF, paths).trajectory]   # MDAnalysis's own read of the times
    np.testing.assert_allclose(t, times, atol=1e-4)
    assert (np.diff(step) > 0).all()
