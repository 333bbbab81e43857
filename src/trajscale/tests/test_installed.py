"""An installed trajscale against MDAnalysis, on MDAnalysisTests' AdK (PSF/DCD, 98 frames)."""

from __future__ import annotations

import numpy as np
import pytest

mda = pytest.importorskip("MDAnalysis")
D = pytest.importorskip("MDAnalysisTests.datafiles")

import trajscale as ts  # noqa: E402
from trajscale.convert.convert import convert  # noqa: E402
from trajscale.h5md.layout import Layout  # noqa: E402


@pytest.fixture(scope="module")
def h5md(tmp_path_factory):
    path = tmp_path_factory.mktemp("installed") / "adk.h5md"
    convert(D.PSF, [D.DCD], str(path), layout=Layout.parse("auto", "gzip:1"))
    return str(path)


@pytest.fixture(scope="module")
def mda_rmsd():
    from MDAnalysis.analysis import rms

    return rms.RMSD(mda.Universe(D.PSF, D.DCD), select="name CA").run().results.rmsd[:, 2]


def test_converted_file_reads_back_in_mdanalysis(h5md):
    ours, ref = mda.Universe(D.PSF, h5md), mda.Universe(D.PSF, D.DCD)
    assert ours.trajectory.n_frames == ref.trajectory.n_frames
    for a, b in zip(ours.trajectory[::10], ref.trajectory[::10], strict=False):
        np.testing.assert_allclose(a.positions, b.positions, atol=1e-4)


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_rmsd_equals_mdanalysis(h5md, mda_rmsd, executor):
    r = ts.run(ts.RMSD(select="name CA"), D.PSF, h5md, executor=executor, n_workers=2)
    np.testing.assert_allclose(r.rmsd, mda_rmsd, atol=1e-4)


def test_rmsf_same_bits_for_any_split(h5md):
    from MDAnalysis.analysis import rms

    ref = rms.RMSF(mda.Universe(D.PSF, D.DCD).select_atoms("name CA")).run().results.rmsf
    one = ts.run(ts.RMSF(select="name CA"), D.PSF, h5md, n_tasks=1).rmsf
    np.testing.assert_allclose(one, ref, atol=1e-5)
    assert np.array_equal(ts.run(ts.RMSF(select="name CA"), D.PSF, h5md, n_tasks=7).rmsf, one)


def test_trajscale_format_reads_and_writes(tmp_path, h5md):
    import trajscale.mda

    u = mda.Universe(D.PSF, h5md, format="TRAJSCALE")
    out = tmp_path / "ca.h5md"
    ca = u.select_atoms("name CA")
    with mda.Writer(str(out), ca.n_atoms, format="TRAJSCALE") as w:
        for _ in u.trajectory:
            w.write(ca)
    back = trajscale.mda.Reader(str(out))
    ref = mda.Universe(D.PSF, D.DCD)
    for a, b in zip(back[::7], ref.trajectory[::7], strict=False):
        np.testing.assert_allclose(a.positions, b.positions[ca.indices], atol=1e-4)
