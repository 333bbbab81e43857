"""Backbone phi/psi per frame equal MDAnalysis's Ramachandran (and its calc_dihedrals / minimize_vectors), on
every executor, with and without a periodic box."""

from __future__ import annotations

import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.lib.distances import calc_dihedrals, minimize_vectors
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.analysis.dihedrals import block_dihedral_sincos, block_dihedrals, dihedral_angles, minimum_image
from trajscale.convert.convert import convert
from trajscale.errors import SelectionError
from trajscale.h5md.layout import Layout

warnings.filterwarnings("ignore", module="MDAnalysis")


def mda_angles(top, traj, select="protein"):
    # here, not at the module's top: it imports matplotlib.pyplot, which every pytest worker would pay at collection
    from MDAnalysis.analysis.dihedrals import Ramachandran as MDARamachandran
    u = mda.Universe(top, traj)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MDARamachandran(u.select_atoms(select)).run().results.angles


@pytest.fixture(scope="module")
def adk_h5md(tmp_path_factory):
    out = tmp_path_factory.mktemp("rama") / "adk.h5md"
    convert(D.PSF, [D.DCD], str(out), layout=Layout.parse("frame"))
    return str(out)


def assert_angles_equal(ours, ref):
    """Angles equal modulo 360 (an angle at the +-180 seam may land on either side in float32 input)."""
    assert ours.shape == ref.shape
    diff = (np.asarray(ours, np.float64) - ref + 180.0) % 360.0 - 180.0
    assert np.abs(diff).max() < 1e-3, np.abs(diff).max()


def test_psf_dcd_equals_mdanalysis(adk_h5md):
    r = ts.run(ts.Ramachandran(), D.PSF, adk_h5md, n_tasks=3)
    ref = mda_angles(D.PSF, D.DCD)
    assert r.angles.shape == (98, 212, 2)   # AdK: 214 residues less the first and last
    assert_angles_equal(r.angles, ref)
    np.testing.assert_array_equal(r.frames, np.arange(98))


def test_a_residue_range(adk_h5md):
    r = ts.run(ts.Ramachandran("resid 10-30"), D.PSF, adk_h5md)
    assert_angles_equal(r.angles, mda_angles(D.PSF, D.DCD, "resid 10-30"))


def test_water_box_minimum_image_equals_mdanalysis():
    """AdK in a dodecahedron of water (GRO/XTC): every bond minimum-imaged in the triclinic box."""
    r = ts.run(ts.Ramachandran(), D.GRO, D.XTC, n_tasks=2)
    assert_angles_equal(r.angles, mda_angles(D.GRO, D.XTC))


@pytest.mark.parametrize("executor", ["threads", "processes", pytest.param("dask", marks=pytest.mark.slow(seconds=2))])
def test_every_executor_gives_the_same_bits(adk_h5md, executor):
    if executor == "dask":
        pytest.importorskip("distributed")
    serial = ts.run(ts.Ramachandran(sincos=True), D.PSF, adk_h5md, n_tasks=5)
    with ts.make_executor(executor, 2) as ex:
        got = ts.run(ts.Ramachandran(sincos=True), D.PSF, adk_h5md, executor=ex, n_tasks=5)
    np.testing.assert_array_equal(got.sincos, serial.sincos)


def test_sincos_are_the_angles_sine_and_cosine(adk_h5md):
    r = ts.run(ts.Ramachandran(sincos=True), D.PSF, adk_h5md)
    ref = np.deg2rad(mda_angles(D.PSF, D.DCD))
    assert r.sincos.shape == (98, 212, 4)
    expect = np.stack([np.sin(ref[..., 0]), np.cos(ref[..., 0]), np.sin(ref[..., 1]), np.cos(ref[..., 1])], axis=-1)
    np.testing.assert_allclose(r.sincos, expect, atol=2e-5)


def test_random_quadruples_equal_calc_dihedrals():
    """Random atoms in an orthorhombic and a skewed triclinic box, and without one: calc_dihedrals per frame."""
    rng = np.random.default_rng(7)
    boxes = np.array([[30, 31, 29, 90, 90, 90], [25, 27, 30, 70, 80, 65], [0, 0, 0, 0, 0, 0]], np.float32)
    x = (rng.random((3, 4, 200, 3)) * 60 - 15).astype(np.float32)
    ours = dihedral_angles(x[:, 0], x[:, 1], x[:, 2], x[:, 3], boxes)
    for f in range(3):
        box = boxes[f] if boxes[f].any() else None
        ref = calc_dihedrals(x[f, 0], x[f, 1], x[f, 2], x[f, 3], box=box)
        np.testing.assert_allclose(ours[f], ref, atol=1e-4)


def test_compiled_quadruples_equal_calc_dihedrals():
    """The compiled kernel (no box, orthorhombic) and its NumPy fallback (triclinic), frame by frame."""
    rng = np.random.default_rng(11)
    boxes = np.array([[30, 31, 29, 90, 90, 90], [25, 27, 30, 70, 80, 65], [0, 0, 0, 0, 0, 0]], np.float32)
    x = (rng.random((3, 300, 3)) * 60 - 15).astype(np.float32)
    quad = np.stack([rng.choice(300, 4, replace=False) for _ in range(150)], axis=1)   # (no zero bond)
    ours = block_dihedrals(x, quad, boxes)
    for f in range(3):
        box = boxes[f] if boxes[f].any() else None
        ref = calc_dihedrals(*(x[f, q].astype(np.float64) for q in quad), box=box)
        np.testing.assert_allclose(ours[f], ref, atol=1e-5)   # (MDAnalysis images in its float32 box)
    # and the NumPy float64 computation of the same bonds, to rounding
    numpy64 = dihedral_angles(*(x[:, q] for q in quad), boxes)
    np.testing.assert_allclose(ours, numpy64, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(block_dihedrals(x[1:], quad, boxes[1:]), ours[1:])   # (the same bits split)


def test_minimum_image_equals_minimize_vectors():
    rng = np.random.default_rng(3)
    boxes = np.array([[20, 22, 24, 90, 90, 90], [20, 22, 24, 60, 75, 80], [18, 18, 18, 60, 60, 90]], np.float32)
    d = (rng.random((3, 500, 3)) * 80 - 40).astype(np.float32)
    ours = minimum_image(d, boxes)
    for f in range(3):
        np.testing.assert_allclose(np.linalg.norm(ours[f], axis=1),
                                   np.linalg.norm(minimize_vectors(d[f], boxes[f]).astype(np.float64), axis=1),
                                   rtol=1e-5, atol=1e-4)


def test_no_residue_with_both_angles_is_a_clear_error(adk_h5md):
    with pytest.raises(SelectionError, match="phi and a psi"):
        ts.run(ts.Ramachandran("resid 1"), D.PSF, adk_h5md)


def test_registered_with_a_command():
    from trajscale.analysis import ANALYSES

    assert ANALYSES["ramachandran"] is ts.Ramachandran
    assert ts.Ramachandran.command is not None


def test_compiled_minimum_image_keeps_the_bits_of_rounding_every_bond():
    """The kernel leaves a bond shorter than half its box edge as it is (no division): the bits must stay
    those of ``d - L * rint(d / L)`` for every bond, which turns a -0 component into +0. Planar quadruples
    (180° dihedrals, ±0 coordinates: ``atan2(±0, x < 0)`` is ±π) and bonds beyond half the box, against
    NumPy's float64 minimum image and cross products of the same bonds, to the bit."""
    x = np.array([[[0.0, 0.0, 0.0], [1.5, -0.0, 0.0], [1.5, 1.5, -0.0], [3.0, 1.5, 0.0],
                   [-0.0, 1.5, 0.0], [0.0, -0.0, 1.5], [14.0, 0.0, 0.0], [-14.0, 0.0, 0.0]]], np.float32)
    x = np.concatenate([x, -x, x[:, ::-1]])
    quad = np.array([[0, 1, 2, 3], [3, 2, 1, 0], [4, 0, 1, 2], [0, 4, 5, 1], [0, 6, 7, 1], [6, 0, 1, 7]]).T
    boxes = np.array([[20, 20, 20, 90, 90, 90], [20, 21, 22, 90, 90, 90], [6, 6, 6, 90, 90, 90]], np.float32)
    ours = block_dihedrals(x, quad, boxes)
    ref = dihedral_angles(*(x[:, q] for q in quad), boxes)
    assert np.abs(ours).max() == np.pi   # (the planar ones: ±π, by the sign of a zero)
    np.testing.assert_array_equal(np.signbit(ours), np.signbit(ref))
    np.testing.assert_array_equal(ours, ref)


def test_compiled_sincos_equal_the_sine_and_cosine_of_the_angles():
    """The sin/cos kernel (no angle made) against NumPy's sin and cos of the angles, to rounding, for random
    quadruples with no box, an orthorhombic and a triclinic box, and the cases it leaves to ``atan2``:
    collinear atoms (``atan2(0, 0)``: 0 and 1), a zero-length middle bond and a NaN coordinate (NaN);
    any split of the frames gives the same bits."""
    rng = np.random.default_rng(5)
    boxes = np.array([[30, 31, 29, 90, 90, 90], [25, 27, 30, 70, 80, 65], [0, 0, 0, 0, 0, 0]], np.float32)
    x = (rng.random((3, 300, 3)) * 60 - 15).astype(np.float32)
    x[:, 1], x[:, 2] = x[:, 0] + [1.0, 0.0, 0.0], x[:, 0] + [2.0, 0.0, 0.0]   # 0, 1, 2, 3: collinear
    x[:, 3] = x[:, 0] + [3.0, 0.0, 0.0]
    x[:, 5] = x[:, 4]                                                        # 6-4-5-7: a zero middle bond
    x[:, 9, 1] = np.nan
    quad = np.concatenate([np.stack([rng.choice(np.arange(10, 300), 4, replace=False) for _ in range(150)], axis=1),
                           np.array([[0, 1, 2, 3], [6, 4, 5, 7], [8, 9, 10, 11]]).T], axis=1)
    ours = block_dihedral_sincos(x, quad, boxes)
    angles = block_dihedrals(x, quad, boxes)
    assert ours.shape == (3, 153, 2)
    np.testing.assert_allclose(ours, np.stack([np.sin(angles), np.cos(angles)], axis=-1), rtol=0, atol=4e-16)
    np.testing.assert_array_equal(ours[:, 150], [[0.0, 1.0]] * 3)            # (atan2(0, 0) is 0)
    assert np.isnan(ours[:, 151:]).all() and not np.isnan(ours[:, :150]).any()
    np.testing.assert_array_equal(block_dihedral_sincos(x[1:], quad, boxes[1:]), ours[1:])
    np.testing.assert_array_equal(block_dihedral_sincos(x, quad), block_dihedral_sincos(x, quad, boxes[[2, 2, 2]]))


def test_feature_labels_made_once_per_topology_are_each_analysis_own(adk_h5md):
    """Members sharing a topology share its labels (read-only, made once): a sin/cos run and an angles run of
    the same topology each get their own, MDAnalysis's residues (those with both angles) in order."""
    u = mda.Universe(D.PSF, D.DCD)
    res = u.select_atoms("protein").residues[1:-1]
    for sincos, kinds in ((True, ["sin(phi)", "cos(phi)", "sin(psi)", "cos(psi)"]), (False, ["phi", "psi"]),
                          (True, ["sin(phi)", "cos(phi)", "sin(psi)", "cos(psi)"])):
        r = ts.run(ts.Ramachandran(sincos=sincos), D.PSF, adk_h5md, stop=2)
        labels = r.feature_labels()
        k = len(kinds)
        assert labels.feature.tolist() == kinds * len(res)
        np.testing.assert_array_equal(labels.resname, np.repeat(res.resnames.astype(str), k))
        np.testing.assert_array_equal(labels.resid, np.repeat(res.resids, k))
        assert not labels.feature.flags.writeable
