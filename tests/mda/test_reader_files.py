"""trajscale.mda.Reader and Writer on real systems, against MDAnalysis's own readers."""

from __future__ import annotations

import os
import pickle

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

import trajscale.mda
from trajscale.convert.convert import convert
from trajscale.h5md.layout import Layout


@pytest.fixture(scope="module")
def vacuum_h5md(tmp_path_factory):
    path = tmp_path_factory.mktemp("mdareader") / "adk.h5md"
    convert(D.PSF, [D.DCD], str(path), layout=Layout.parse("frame"))
    return str(path)


def test_registering_changes_no_other_format():
    from MDAnalysis.coordinates.H5MD import H5MDReader
    from MDAnalysis.coordinates.XTC import XTCReader
    from MDAnalysis.core._get_readers import get_reader_for

    assert get_reader_for("x.h5md") is H5MDReader
    assert get_reader_for("x.xtc") is XTCReader
    assert get_reader_for("x.h5md", format="TRAJSCALE") is trajscale.mda.Reader
    assert get_reader_for("x.h5md", format=trajscale.mda.Reader) is trajscale.mda.Reader


def test_iterates_slices_and_indexes_like_mdanalysis(vacuum_h5md):
    ours = mda.Universe(D.PSF, vacuum_h5md, format="TRAJSCALE").trajectory
    ref = mda.Universe(D.PSF, D.DCD).trajectory
    assert (ours.n_frames, ours.n_atoms) == (ref.n_frames, ref.n_atoms)
    for sel in (slice(None), slice(3, 70, 7), slice(None, None, -5), [90, 3, 3, 41], np.arange(98) % 3 == 0):
        got = [(ts.frame, ts.time, ts.positions.copy()) for ts in ours[sel]]
        want = [(ts.frame, ts.time, ts.positions.copy()) for ts in ref[sel]]
        assert [g[0] for g in got] == [w[0] for w in want], sel
        np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], atol=1e-4)
        np.testing.assert_allclose(np.array([g[2] for g in got]), np.array([w[2] for w in want]), atol=1e-4)
    assert ours.dt == pytest.approx(ref.dt, abs=1e-4)


def test_xtc_parts_chain_and_velocities(tmp_path):
    """Parts of the water box's TRR (positions, velocities, forces) as one trajectory."""
    u = mda.Universe(D.TPR, D.TRR)
    parts = []
    for k, (a, b) in enumerate(((0, 4), (4, 7), (7, u.trajectory.n_frames))):
        parts.append(str(tmp_path / f"part{k}.trr"))
        with mda.Writer(parts[-1], u.atoms.n_atoms) as w:
            for _ in u.trajectory[a:b]:
                w.write(u.atoms)
    ours = mda.Universe(D.TPR, parts, format=trajscale.mda.Reader)
    assert ours.trajectory.n_frames == u.trajectory.n_frames
    assert ours.trajectory.has_velocities and ours.trajectory.has_forces == u.trajectory.ts.has_forces
    for a, b in zip(ours.trajectory, u.trajectory, strict=False):
        np.testing.assert_allclose(a.positions, b.positions, atol=1e-3)
        np.testing.assert_allclose(a.velocities, b.velocities, atol=1e-3)
        np.testing.assert_allclose(a.dimensions, b.dimensions, atol=1e-3)


def test_mdanalysis_rmsd_on_its_multiprocessing_backend(vacuum_h5md):
    """The reader pickles: MDAnalysis's own parallel backend runs on it and gives its serial answer."""
    u = mda.Universe(D.PSF, vacuum_h5md, format="TRAJSCALE")
    got = rms.RMSD(u, select="name CA").run(backend="multiprocessing", n_workers=2).results.rmsd
    ref = rms.RMSD(mda.Universe(D.PSF, D.DCD), select="name CA").run().results.rmsd
    np.testing.assert_allclose(got, ref, atol=1e-4)
    u.trajectory[17]
    again = pickle.loads(pickle.dumps(u.trajectory))
    assert again.ts.frame == 17 and np.array_equal(again.ts.positions, u.trajectory.ts.positions)


def test_rewritten_file_is_reopened_not_served_stale(tmp_path, vacuum_h5md):
    path = tmp_path / "t.h5md"
    convert(D.PSF, [D.DCD], str(path), layout=Layout.parse("frame"), stop=20)
    r = trajscale.mda.Reader(str(path))
    first = r[5].positions.copy()
    # rewritten in place by another program: other frames under the same name
    convert(D.PSF, [D.DCD], str(path), layout=Layout.parse("frame"), start=50, overwrite=True)
    assert r.n_frames == 20
    moved = r[5].positions.copy()
    want = mda.Universe(D.PSF, D.DCD).trajectory[55].positions
    np.testing.assert_allclose(moved, want, atol=1e-4)
    assert not np.allclose(moved, first)
    assert r.n_frames == 48


def test_a_file_it_cannot_serve_is_one_error_naming_it(tmp_path):
    bad = tmp_path / "velocities_only.h5md"
    with h5py.File(bad, "w") as f:
        f.create_group("h5md").attrs["version"] = [1, 1]
        g = f.create_group("particles/all/velocity")
        g.create_dataset("value", data=np.zeros((2, 3, 3), np.float32)).attrs["unit"] = "nm ps-1"
        g.create_dataset("step", data=[0, 1])
        g.create_dataset("time", data=[0.0, 1.0]).attrs["unit"] = "ps"
        f["particles/all"].create_group("box").attrs["dimension"] = 3
    with pytest.raises(IOError, match=str(bad)):
        trajscale.mda.Reader(str(bad))
    odd = tmp_path / "odd_encoding.h5md"
    convert(D.PSF, [D.DCD], str(odd), layout=Layout.parse("frame", "blosc-lz4"), stop=3, precision=0.01,
            encoding="deltas")
    with h5py.File(odd, "r+") as f:
        f["particles/all/position/value"].attrs["trajscale_encoding"] = "zigzag-fancy"
    with pytest.raises(IOError, match=str(odd)):
        trajscale.mda.Reader(str(odd))


def test_writer_file_equals_convert(tmp_path, vacuum_h5md):
    """The same frames written from an MDAnalysis loop and by `trajscale convert` hold the same data."""
    opts = {"chunks": "auto", "compression": "blosc-lz4", "precision": 0.01, "encoding": "deltas"}
    by_convert = tmp_path / "convert.h5md"
    convert(D.PSF, [D.DCD], str(by_convert), layout=Layout.parse(opts["chunks"], opts["compression"]),
            precision=opts["precision"], encoding=opts["encoding"])
    u = mda.Universe(D.PSF, D.DCD)
    by_writer = tmp_path / "writer.h5md"
    with mda.Writer(str(by_writer), u.atoms.n_atoms, format="TRAJSCALE", **opts) as w:
        for _ in u.trajectory:
            w.write(u.atoms)
    with h5py.File(by_convert, "r") as a, h5py.File(by_writer, "r") as b:
        for name in ("position/value", "position/step", "position/time"):
            da, db = a[f"particles/all/{name}"], b[f"particles/all/{name}"]
            assert np.array_equal(da[()], db[()]), name
            assert (da.chunks, da.compression) == (db.chunks, db.compression), name
        pa, pb = a["particles/all/position/value"], b["particles/all/position/value"]
        assert dict(pa.attrs) .keys() == dict(pb.attrs).keys()
        assert np.array_equal(a["particles/all/position/trajscale_codes"][()],
                              b["particles/all/position/trajscale_codes"][()])


def test_writer_refuses_other_atom_counts_and_leaves_no_file(tmp_path):
    u = mda.Universe(D.PSF, D.DCD)
    out = tmp_path / "out.h5md"
    with pytest.raises(ValueError, match=rf"{out}: frame 0 has 3341 atoms, the writer was made for 100"):
        with trajscale.mda.Writer(str(out), 100) as w:
            w.write(u.atoms)
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if "tmp" in p]
    out.write_text("mine")
    with pytest.raises(Exception, match="exists"):
        trajscale.mda.Writer(str(out), u.atoms.n_atoms)
    assert out.read_text() == "mine"


@pytest.mark.mpi
def test_mpi_io_reader_under_mdanalysis_mpi_backend(tmp_path, vacuum_h5md):
    pytest.importorskip("mpi4py")
    import h5py as _h5py

    if not _h5py.get_config().mpi:
        pytest.skip("h5py without MPI")
    from pathlib import Path

    from tests.conftest import run_mpi

    out = tmp_path / "rmsd.npy"
    script = str(Path(__file__).with_name("mpi_reader_script.py"))
    proc = run_mpi(2, [script, D.PSF, vacuum_h5md, str(out)], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = rms.RMSD(mda.Universe(D.PSF, D.DCD), select="name CA").run().results.rmsd
    np.testing.assert_allclose(np.load(out), ref, atol=1e-4)
