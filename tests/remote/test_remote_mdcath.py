"""An mdCATH-shaped file behind a URL (a real S3 server): its members pass the Source conformance suite against
MDAnalysis on the local file's arrays, the registry tells its format from the object's first bytes, and a
worker opened from the config fetches only the frames' bytes."""

from __future__ import annotations

import os

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.sources import test_mdcath as local
from tests.sources.test_mdcath import MEMBERS, reference_universe
from trajscale.mdcath.source import MDCATHSource, members
from trajscale.sources import registry, source_from_config
from trajscale.storage.location import Location
from trajscale.testing.mdcath import from_universe

pytestmark = pytest.mark.remote
MD_BUCKET = "mdcath"


@pytest.fixture(scope="module")
def mdcath_object(s3_server, tmp_path_factory):
    """(local file, s3:// URL, storage options) of one mdCATH-shaped file uploaded to the server."""
    local = from_universe(tmp_path_factory.mktemp("mdcath-remote") / "mdcath_dataset_1adkA00.h5",
                          mda.Universe(D.PSF, D.DCD), members=MEMBERS, n_frames=(10, 12, 7))
    client = s3_server.client()
    if MD_BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=MD_BUCKET)
    client.upload_file(local, MD_BUCKET, "data/mdcath_dataset_1adkA00.h5")
    options = {"endpoint_url": s3_server.endpoint, "key": "testing", "secret": "testing-secret-do-not-print",
               "region_name": "us-east-1"}
    return local, f"s3://{MD_BUCKET}/data/mdcath_dataset_1adkA00.h5", options


class TestMDCATHFromS3(local.TestMDCATHMember):
    """The local member's tests (the conformance suite with mdCATH's times), on the object."""

    n_cases = 2

    @pytest.fixture
    def make_source(self, mdcath_object):
        _, url, options = mdcath_object
        return lambda: MDCATHSource(url, member="348/0", storage_options=options)

    @pytest.fixture
    def universe(self, mdcath_object):
        return reference_universe(mdcath_object[0], "348/0")


def test_format_and_members_from_the_url(mdcath_object, s3_env):
    local, url, _ = mdcath_object
    assert registry.guess(Location(url)).format == "MDCATH"
    assert members(url) == members(local)


def test_a_worker_fetches_only_the_frames_it_reads(mdcath_object):
    local, url, options = mdcath_object
    with MDCATHSource(url, member="348/1", storage_options=options) as src:
        cfg = src.get_config()
    atoms = np.arange(100, 400)
    with source_from_config(cfg) as worker, MDCATHSource(local, member="348/1") as here:
        got = worker.read(1, 6, atoms)
        np.testing.assert_array_equal(got.positions, here.read(1, 6, atoms).positions)
        stats = worker.remote_stats()
    # one request from frame 1's atom 100 to frame 5's atom 399 (the gaps between frames are below the merge
    # gap, so they are fetched with them), and nothing of HDF5's metadata
    assert stats["requests"] == 1 and stats["bytes"] == 4 * 3341 * 12 + 300 * 12, stats


@pytest.mark.parametrize("cached", [False, True])
def test_the_ensemble_dataset_reads_the_object_as_the_local_file(mdcath_object, tmp_path, cached):
    """EnsembleDataset over the object, by range requests or through the node-local cache (one copy, keyed by the
    object's ETag and size): the same samples as over the local file."""
    from trajscale.ml.ensemble import EnsembleDataset
    from trajscale.storage.nodecache import NodeCache

    local, url, options = mdcath_object
    cache_dir = tmp_path / "node" if cached else None
    remote = EnsembleDataset([url], fields=("position", "force"), cache_dir=cache_dir, storage_options=options)
    here = EnsembleDataset([local], fields=("position", "force"))
    assert remote.names == here.names and len(remote) == len(here) == 29
    index = np.random.default_rng(2).permutation(len(here))[:20]
    got, want = remote.read(index), here.read(index)
    for k in ("position", "force", "n_atoms", "frame", "temperature", "replica"):
        np.testing.assert_array_equal(got[k], want[k])
    if cached:
        assert [p.name.endswith(".h5") for p in NodeCache(cache_dir).entries()] == [True]
    remote.close()
    if not cached:   # time-lagged pairs in order (a sampler's batch): each run of the frames t and t + 2 fetched once
        from trajscale.ml.lagged_dataset import LaggedEnsembleDataset

        lagged = LaggedEnsembleDataset([url], 2, storage_options=options)
        batch = lagged.read(np.arange(len(lagged)))
        with h5py.File(local, "r") as f:
            dom = f[next(iter(f))]
            coords = {n: dom[n.split("/", 1)[1]]["coords"][()] for n in lagged.names}
        pairs = list(zip(batch["name"], batch["frame"].tolist(), strict=True))
        assert pairs == [(n, t) for n in lagged.names for t in range(len(coords[n]) - 2)]
        np.testing.assert_array_equal(batch["x"], np.concatenate([coords[n][t] for n, t in pairs]))
        np.testing.assert_array_equal(batch["y"], np.concatenate([coords[n][t + 2] for n, t in pairs]))
        assert lagged.stats.reads == len(lagged.names)   # (a member's frames 0 to its last: one run)
        lagged.close()


def test_a_workers_topology_and_atomic_numbers_equal_the_local_files(mdcath_object):
    """A member opened from its config (the object's identity shipped, its first bytes never fetched) reads its
    topology and ``z`` through the same byte store as its frames: h5py's values of the local file."""
    local, url, options = mdcath_object
    with MDCATHSource(url, member="320/0", storage_options=options) as src:
        cfg = src.get_config()
    assert cfg["identity"][1] == os.path.getsize(local)   # (the object's size, as its first request said)
    with source_from_config(cfg) as worker, h5py.File(local, "r") as f:
        np.testing.assert_array_equal(worker.atomic_numbers(), f["1adkA00/z"][()])
        u = worker.universe
        ref = mda.Universe(D.PSF, D.DCD)
        np.testing.assert_array_equal(u.atoms.names, ref.atoms.names)
        np.testing.assert_array_equal(u.atoms.resids, ref.atoms.resids)


@pytest.mark.slow(seconds=2)   # out of the quick tier: two loader workers that each import torch
def test_a_loaders_workers_over_an_object_glob_give_the_in_process_epoch(mdcath_object, s3_env):
    """``EnsembleDataset("s3://.../mdcath_dataset_*.h5")`` has read the objects in this process (the client's
    runtime runs here): its loader's workers are not forked from it (a forked worker never gave a first
    batch), and two of them give the epoch the loader gives without workers. Each worker dies with its parent."""
    pytest.importorskip("torch")
    from trajscale.ml import make_loader
    from trajscale.ml.ensemble import EnsembleDataset

    local, url, options = mdcath_object
    ds = EnsembleDataset(url.rsplit("/", 1)[0] + "/mdcath_dataset_*.h5", storage_options=options)
    assert len(ds) == 29

    def epoch(**kw):
        batches = list(make_loader(ds, batch_size=8, block=4, seed=5, **kw))
        return {k: np.concatenate([b[k].numpy() for b in batches]) for k in ("position", "frame", "trajectory")}

    pooled = epoch(num_workers=2, timeout=120)   # (without the rule, a forked worker's first batch never came)
    in_process = epoch()
    for k in in_process:
        np.testing.assert_array_equal(pooled[k], in_process[k])
    with h5py.File(local, "r") as f:   # the first sample's atoms: the file's coords, as h5py reads them
        member = ds.names[int(in_process["trajectory"][0])]
        temp, replica = member.rsplit("/", 2)[-2:]
        coords = f[f"1adkA00/{temp}/{replica}/coords"][int(in_process["frame"][0])]
    np.testing.assert_allclose(in_process["position"][:len(coords)], coords, rtol=0, atol=1e-5)
