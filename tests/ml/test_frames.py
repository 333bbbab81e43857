"""FrameDataset: trajectory frames as samples, against MDAnalysis's own reader and alignment."""

from __future__ import annotations

import numpy as np
import pytest

from tests.executors import fork_here
from trajscale.ml import FrameDataset, make_loader

SEL = "name CA"


@pytest.fixture(scope="module")
def mda_ca(adk_vacuum):
    import MDAnalysis as mda

    u = mda.Universe(*adk_vacuum)
    ca = u.select_atoms(SEL)
    return u, ca, np.array([ca.positions.copy() for _ in u.trajectory])


def test_frames_equal_mdanalysis(adk_vacuum, adk_vacuum_h5md, mda_ca):
    _, _, ref = mda_ca
    ds = FrameDataset(adk_vacuum[0], adk_vacuum_h5md, select=SEL)
    assert len(ds) == 98
    np.testing.assert_allclose(ds[5]["position"], ref[5], atol=1e-4)
    idx = [97, 10, 11, 12, 0, 50]
    got = ds[idx]
    np.testing.assert_allclose(got["position"], ref[idx], atol=1e-4)
    np.testing.assert_array_equal(got["frame"], idx)


def test_dcd_through_mdanalysis_source_and_centering(adk_vacuum, mda_ca):
    _, _, ref = mda_ca
    ds = FrameDataset(adk_vacuum[0], adk_vacuum[1], select=SEL, center=True)
    got = ds[[3, 4, 90]]["position"]
    want = ref[[3, 4, 90]] - ref[[3, 4, 90]].astype(np.float64).mean(axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_superposed_frames_equal_mdanalysis_alignto(adk_vacuum, adk_vacuum_h5md):
    import MDAnalysis as mda
    from MDAnalysis.analysis import align

    ds = FrameDataset(adk_vacuum[0], adk_vacuum_h5md, select=SEL, superpose=True, ref_frame=0)
    ref_u, mob = mda.Universe(*adk_vacuum), mda.Universe(*adk_vacuum)
    for frame in (0, 40, 97):
        mob.trajectory[frame]
        align.alignto(mob.select_atoms(SEL), ref_u.select_atoms(SEL), weights=None)
        np.testing.assert_allclose(ds[frame]["position"], mob.select_atoms(SEL).positions, atol=2e-3)


@pytest.mark.fork
def test_loader_with_forked_workers_in_sampler_order(adk_vacuum, adk_vacuum_h5md, mda_ca):
    pytest.importorskip("torch")
    from trajscale.ml import BlockBatchSampler

    _, _, ref = mda_ca
    ds = FrameDataset(adk_vacuum[0], adk_vacuum_h5md, select=SEL)
    loader = make_loader(ds, batch_size=16, seed=3, num_workers=2, multiprocessing_context=fork_here())
    frames = np.concatenate([b["frame"].numpy() for b in loader])
    pos = np.concatenate([b["position"].numpy() for b in make_loader(ds, batch_size=16, seed=3)])
    order = np.concatenate(list(BlockBatchSampler(98, 16, seed=3)))
    np.testing.assert_array_equal(frames, order)
    np.testing.assert_allclose(pos, ref[order], atol=1e-4)
