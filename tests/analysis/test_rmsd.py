"""RMSD equals MDAnalysis's rms.RMSD, on every local executor and split; kernel edge cases."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

import trajscale as ts
from trajscale.kernels.superpose import superpose_rmsd


@pytest.fixture(scope="module")
def mda_vacuum(adk_vacuum):
    u = mda.Universe(*adk_vacuum)
    return rms.RMSD(u, select="name CA", groupselections=["backbone", "resid 1-50"]).run().results.rmsd


@pytest.fixture(scope="module")
def mda_water(adk_water):
    u = mda.Universe(adk_water["gro"], adk_water["xtc"])
    return rms.RMSD(u, select="protein and name CA", ref_frame=3).run().results.rmsd


@pytest.fixture(scope="module")
def serial_vacuum(adk_vacuum, adk_vacuum_h5md):
    return ts.run(ts.RMSD(select="name CA", groupselections=["backbone", "resid 1-50"]),
                  adk_vacuum[0], adk_vacuum_h5md)


@pytest.mark.parametrize("executor,n_workers,n_tasks", [
    ("serial", 1, 1), ("serial", 1, 7), ("processes", 1, 3), ("processes", 2, 4), ("processes", 3, 11)])
@pytest.mark.parametrize("fmt", ["h5md", "dcd"])
def test_vacuum_equals_mdanalysis(adk_vacuum, adk_vacuum_h5md, mda_vacuum, serial_vacuum,
                                  executor, n_workers, n_tasks, fmt):
    traj = adk_vacuum_h5md if fmt == "h5md" else adk_vacuum[1]
    r = ts.run(ts.RMSD(select="name CA", groupselections=["backbone", "resid 1-50"]),
               adk_vacuum[0], traj, executor=executor, n_workers=n_workers, n_tasks=n_tasks)
    np.testing.assert_allclose(r.table(), mda_vacuum, atol=1e-4, rtol=0)
    np.testing.assert_array_equal(r.frames, np.arange(98))
    # same numbers bit for bit on every executor and split
    np.testing.assert_array_equal(r.table(), serial_vacuum.table())
    assert r.report.n_tasks == n_tasks and r.report.executor == executor
    assert sum(t.frames for t in r.report.tasks) == 98


@pytest.mark.parametrize("executor,n_workers", [("serial", 1), ("processes", 2)])
def test_water_xtc_and_h5md_equal_mdanalysis(tmp_path, adk_water, mda_water, executor, n_workers):
    r = ts.run(ts.RMSD(select="protein and name CA", ref_frame=3), adk_water["gro"], adk_water["xtc"],
               executor=executor, n_workers=n_workers, n_tasks=3)
    np.testing.assert_allclose(r.rmsd, mda_water[:, 2], atol=1e-4)
    np.testing.assert_allclose(r.times, mda_water[:, 1], rtol=1e-6)
    from trajscale.convert.convert import convert

    h5 = tmp_path / "w.h5md"
    convert(adk_water["gro"], [adk_water["xtc"]], str(h5))
    r2 = ts.run(ts.RMSD(select="protein and name CA", ref_frame=3), adk_water["gro"], str(h5),
                executor=executor, n_workers=n_workers)
    np.testing.assert_allclose(r2.rmsd, mda_water[:, 2], atol=1e-4)


def test_mass_weighted_and_reference_universe(adk_vacuum, adk_vacuum_h5md):
    u = mda.Universe(*adk_vacuum)
    ref = mda.Universe(*adk_vacuum)
    want = rms.RMSD(u, ref, select="backbone", weights="mass", ref_frame=20).run().results.rmsd[:, 2]
    r = ts.run(ts.RMSD(select="backbone", reference=ref, weights="mass", ref_frame=20), adk_vacuum[0],
               adk_vacuum_h5md, executor="processes", n_workers=2)
    assert r.rmsd[20] < 1e-4
    np.testing.assert_allclose(r.rmsd, want, atol=1e-4)


def test_any_split_is_bit_identical(adk_vacuum, adk_vacuum_h5md, serial_vacuum):
    # hypothesis imported here, not at the module's top: every pytest worker would pay its import at collection
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=15, deadline=None)
    @given(n_tasks=st.integers(1, 98), start=st.integers(0, 40), length=st.integers(1, 58))
    def split(n_tasks, start, length):
        r = ts.run(ts.RMSD(select="name CA", groupselections=["backbone", "resid 1-50"]), adk_vacuum[0],
                   adk_vacuum_h5md, n_tasks=n_tasks, start=start, stop=start + length)
        np.testing.assert_array_equal(r.table(), serial_vacuum.table()[start:start + length])

    split()


def test_processes_random_split_bit_identical(adk_vacuum, adk_vacuum_h5md, serial_vacuum):
    ex = ts.make_executor("processes", 2)
    try:
        for n_tasks in (2, 5, 13, 98):
            r = ts.run(ts.RMSD(select="name CA", groupselections=["backbone", "resid 1-50"]), adk_vacuum[0],
                       adk_vacuum_h5md, executor=ex, n_tasks=n_tasks)
            np.testing.assert_array_equal(r.table(), serial_vacuum.table())
    finally:
        ex.close()


def _mda_rmsd(a, b, w=None):
    from MDAnalysis.analysis.rms import rmsd

    return rmsd(a, b, weights=w, center=True, superposition=True)


def test_kernel_degenerate_cases():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(20, 3)) * 5
    # identical structures, rotated + translated copies
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    q *= np.sign(np.linalg.det(q))
    frames = np.stack([ref, ref @ q + 3.0, ref + rng.normal(size=ref.shape) * 0.3])
    got = superpose_rmsd(frames.astype(np.float32), ref)
    want = [_mda_rmsd(f.astype(np.float32).astype(np.float64), ref) for f in frames]
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert got[0] < 1e-5 and got[1] < 1e-4
    # collinear atoms
    line = np.outer(np.arange(6.0), [1.0, 2.0, 0.5])
    bent = line.copy()
    bent[5] += [0.0, 0.0, 1.0]
    np.testing.assert_allclose(superpose_rmsd(bent[None], line), [_mda_rmsd(bent, line)], atol=1e-4)
    np.testing.assert_allclose(superpose_rmsd(line[None] * 1.0, line), [0.0], atol=1e-6)
    # a single atom: always 0 after centring
    np.testing.assert_allclose(superpose_rmsd(np.array([[[1.0, 2.0, 3.0]]]), np.array([[5.0, 5, 5]])), [0.0])
    # reflection is not a rotation: a mirrored chiral structure keeps a non-zero RMSD
    mirrored = ref * np.array([1, 1, -1])
    np.testing.assert_allclose(superpose_rmsd(mirrored[None], ref), [_mda_rmsd(mirrored, ref)], atol=1e-4)
    # mass weighting
    w = rng.uniform(1, 16, size=20)
    np.testing.assert_allclose(superpose_rmsd(frames[2:], ref, w), [_mda_rmsd(frames[2], ref, w)], atol=1e-4)


def test_csv_header(tmp_path, serial_vacuum):
    path = tmp_path / "r.csv"
    serial_vacuum.to_csv(path)
    header = path.read_text().splitlines()[0]
    assert header == "frame,time,rmsd,backbone,resid 1-50"
    data = np.loadtxt(path, delimiter=",", skiprows=1)
    np.testing.assert_allclose(data[:, 2], serial_vacuum.rmsd, atol=1e-7)


def test_worker_error_names_frames(adk_vacuum, tmp_path, adk_vacuum_h5md):
    import h5py

    bad = tmp_path / "nan.h5md"
    bad.write_bytes(open(adk_vacuum_h5md, "rb").read())
    with h5py.File(bad, "r+") as f:
        f["particles/all/position/value"][60, 0, :] = np.inf
    with pytest.raises(ts.TrajscaleError, match="frame 60"):
        ts.run(ts.RMSD(select="all"), adk_vacuum[0], str(bad), executor="processes", n_workers=2, n_tasks=4)


def test_weighted_group_rmsd_equals_mdanalysis_rmsd():
    """Groups moved by a fit on other atoms: the compiled kernel against
    MDAnalysis's rms.rmsd(weights=..., center=False, superposition=False)."""
    from MDAnalysis.analysis.rms import rmsd

    from trajscale.kernels import superpose

    rng = np.random.default_rng(3)
    fit_ref = rng.normal(size=(30, 3)) * 4
    group_ref = rng.normal(size=(12, 3)) * 4
    frames = (rng.normal(size=(5, 42, 3)) + np.r_[fit_ref, group_ref]).astype(np.float32)
    w = rng.uniform(0.5, 3.0, 12)
    _, rot, xcom, ycom = superpose.superpose_rmsd(frames[:, :30], fit_ref, want_rotation=True)
    for weights in (None, w):
        got = superpose.rmsd_after_transform(frames[:, 30:], group_ref, rot, xcom, ycom, weights)
        moved = [(f[30:].astype(np.float64) - c) @ r + ycom for f, r, c in zip(frames, rot, xcom, strict=False)]
        want = [rmsd(m, group_ref, weights=weights) for m in moved]
        np.testing.assert_allclose(got, want, rtol=1e-6)
