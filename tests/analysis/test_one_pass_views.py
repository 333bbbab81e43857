"""An RDF in a pass over more atoms than its own maps the pass's block in place (no copy of its atoms), with
the bits of the RDF run alone and its refusal of the same non-finite frames, and no other atoms' NaN."""

from __future__ import annotations

import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.analysis import group
from trajscale.errors import BadCoordinatesError
from trajscale.kernels import pairs

CA, OW = "protein and name CA", "name OW"
#: Blocks of a few frames and several tasks.
SPLIT = {"n_tasks": 2, "max_block_bytes": 2_000_000, "executor": "serial"}


@pytest.fixture(scope="module")
def nan_trr(tmp_path_factory):
    """AdK in water, 6 frames as TRR (floats kept as they are): one water oxygen NaN in frame 2, one water
    hydrogen infinite in frame 4."""
    import MDAnalysis as mda

    u = mda.Universe(D.TPR, D.XTC)
    ow, hw = u.select_atoms(OW).indices[77], u.select_atoms("name HW1").indices[5]
    out = tmp_path_factory.mktemp("nan") / "nan.trr"
    with mda.Writer(str(out), u.atoms.n_atoms) as w:
        for t in u.trajectory[:6]:
            x = u.atoms.positions
            if t.frame == 2:
                x[ow, 1] = np.nan
            if t.frame == 4:
                x[hw, 0] = np.inf
            u.atoms.positions = x
            w.write(u.atoms)
    return str(out)


def test_the_rdf_of_a_pass_is_not_copied_and_has_the_bits_of_its_run_alone(monkeypatch):
    copied = []
    real = group._atoms_of
    monkeypatch.setattr(group, "_atoms_of", lambda block, view: copied.append(len(view)) or real(block, view))
    rdf = ts.RDF(CA, OW, nbins=75, range=(0, 8))
    alone = ts.run(rdf, D.TPR, D.XTC, **SPLIT)
    assert not copied
    _, got, _ = ts.run([ts.RMSD(CA), rdf, ts.RMSF("all")], D.TPR, D.XTC, **SPLIT)
    assert copied and set(copied) == {214}   # the RMSD's 214 CA atoms copied, the RDF's 11,298 atoms not
    np.testing.assert_array_equal(got.count, alone.count)
    np.testing.assert_array_equal(got.rdf, alone.rdf)
    assert got.rdf.tobytes() == alone.rdf.tobytes()


def test_a_non_finite_frame_is_named_in_a_pass_as_alone(nan_trr):
    rdf = ts.RDF(CA, OW, nbins=20, range=(0, 6))
    with pytest.raises(BadCoordinatesError, match=r"nan\.trr: NaN/inf coordinates in frame 2"):
        ts.run(rdf, D.TPR, nan_trr, **SPLIT)
    with pytest.raises(BadCoordinatesError, match=r"nan\.trr: NaN/inf coordinates in frame 2"):
        ts.run([ts.RMSD(CA), rdf, ts.RMSF("all")], D.TPR, nan_trr, **SPLIT)   # the RDF's atoms: a view


def test_another_analysis_s_non_finite_atoms_are_not_the_rdf_s(nan_trr):
    """Frame 4 has a water hydrogen at infinity: not an atom of the RDF, which runs as alone; the RMSD
    that reads it gives that frame NaN, as asked."""
    rdf = ts.RDF(CA, OW, nbins=20, range=(0, 6))
    alone = ts.run(rdf, D.TPR, nan_trr, start=3, **SPLIT)
    rmsd, got = ts.run([ts.RMSD(f"{CA} or name HW1", allow_nan=True), rdf], D.TPR, nan_trr, start=3, **SPLIT)
    assert np.isnan(rmsd.rmsd[1]) and np.isfinite(rmsd.rmsd[[0, 2]]).all()
    assert got.count.sum() > 0
    np.testing.assert_array_equal(got.count, alone.count)
    np.testing.assert_array_equal(got.rdf, alone.rdf)


def test_the_kernel_marks_the_frames_whose_selected_atoms_are_not_finite():
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 30, (5, 400, 3)).astype(np.float32)
    x[1, 10, 0] = np.nan   # an atom of A
    x[2, 350, 2] = -np.inf   # an atom of B
    x[3, 399, 1] = np.nan   # an atom of neither
    dims = np.tile(np.asarray([30.0, 30.0, 30.0, 90, 90, 90], np.float32), (5, 1))
    edges = np.histogram_bin_edges(np.empty(0), bins=10, range=(0.0, 5.0))
    i1, i2 = np.arange(0, 100), np.arange(100, 390)
    finite = np.ones(5, bool)
    got, done = pairs.rdf_histogram(x, i1, i2, dims, 5.0, edges, finite=finite)
    assert done.all()
    assert finite.tolist() == [True, False, False, True, True]
    # the frames marked are left out; the others count as without the check
    ok = np.flatnonzero(finite)
    np.testing.assert_array_equal(got, pairs.rdf_histogram(x[ok], i1, i2, dims[ok], 5.0, edges)[0])


def test_a_pass_over_every_atom_reads_whole_frames(adk_vacuum_h5md):
    """A union of every atom is read as whole frames (no list of atoms to plan at each read), and the
    report still gives each analysis its atoms."""
    from trajscale.engine import prepare

    job, facts = prepare(ts.AnalysisGroup([ts.RMSD("name CA"), ts.RadiusOfGyration("all")]), D.PSF, adk_vacuum_h5md)
    assert job.prepared.atoms is None and facts.n_atoms == 3341
    assert job.prepared.state.views[0] is not None and job.prepared.state.views[1] is None
    got = ts.run([ts.RMSD("name CA"), ts.RadiusOfGyration("all")], D.PSF, adk_vacuum_h5md)
    assert {a.name: a.n_atoms for a in got[0].report.meta.analyses} == {"rmsd": 214, "rgyr": 3341}
    assert got[1].report.n_atoms == 3341


def test_a_pass_reads_blocks_its_analyses_traverse_in_cache(adk_vacuum_h5md):
    """A pass of two or more analyses reads blocks of at most ``PASS_BLOCK_BYTES`` under a larger budget (each
    of its analyses traverses the block in turn); a smaller budget still bounds them, and one analysis alone
    keeps the budget's blocks."""
    from trajscale.engine import prepare
    from trajscale.runspec import RunOptions

    two = [ts.RMSD("name CA"), ts.RadiusOfGyration("all")]
    per_frame = 3341 * 12   # every atom's positions; then a little for the box, time and step, and the RMSD's copy
    job, _ = prepare(ts.AnalysisGroup(two), D.PSF, adk_vacuum_h5md)
    assert job.block_frames * per_frame <= group.PASS_BLOCK_BYTES < (job.block_frames + 1) * (per_frame + 4096)
    job, _ = prepare(ts.AnalysisGroup(two), D.PSF, adk_vacuum_h5md, RunOptions(max_block_bytes=4 * 2**20))
    assert job.block_frames * per_frame <= 4 * 2**20 < (job.block_frames + 1) * (per_frame + 4096)
    job, _ = prepare(ts.AnalysisGroup([ts.RadiusOfGyration("all")]), D.PSF, adk_vacuum_h5md)
    assert job.block_frames * per_frame > group.PASS_BLOCK_BYTES
    got = ts.run(two, D.PSF, adk_vacuum_h5md, max_block_bytes=4 * 2**20)
    alone = [ts.run(a, D.PSF, adk_vacuum_h5md) for a in two]
    assert got[0].rmsd.tobytes() == alone[0].rmsd.tobytes() and got[1].values.tobytes() == alone[1].values.tobytes()
