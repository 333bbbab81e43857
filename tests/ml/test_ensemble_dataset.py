"""EnsembleDataset over mdCATH-shaped files of three atom counts and an H5MD file: every sample equals h5py's
read of the same frame, batches come through torch's DataLoader (no workers and two), the order is the same
for the same seed and epoch, and a process never holds more files open than it was told (an mdCATH file's
members share one)."""

from __future__ import annotations

import os
import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.executors import fork_here
from tests.ml.conftest import mdcath_files
from trajscale.convert.convert import convert
from trajscale.errors import InputFileError
from trajscale.h5md.layout import Layout
from trajscale.ml.ensemble import EnsembleDataset

warnings.filterwarnings("ignore", module="MDAnalysis")

#: domain -> (selection, members, frames per member)
DOMAINS = {"1aaaA00": ("resid 1-40", (("320", "0"), ("348", "1")), (9, 6)),
           "2bbbB00": ("resid 41-120", (("379", "2"),), (11,)),
           "3cccC00": ("all", (("413", "0"), ("450", "4")), (5, 8))}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ens")
    u = mda.Universe(D.PSF, D.DCD)
    out = mdcath_files(d, u, DOMAINS)
    h5md = d / "adk.h5md"
    convert(D.PSF, [D.DCD], str(h5md), layout=Layout.parse("frame"))
    return out, str(h5md)


def reference(files) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
    """(member name, coords, forces in kcal) in the dataset's order, read with h5py."""
    mdcath, _ = files
    out = []
    for path in mdcath:
        with h5py.File(path, "r") as f:
            dom = next(iter(f))
            for t in sorted(k for k in f[dom] if k.isdigit()):
                for r in sorted(f[dom][t]):
                    g = f[dom][t][r]
                    out.append((f"{dom}/{t}/{r}", g["coords"][()], g["forces"][()], f[dom]["z"][()]))
    return out


def h5md_positions(path: str) -> np.ndarray:
    with h5py.File(path, "r") as f:
        pos = f["particles/trajectory/position"] if "trajectory" in f["particles"] else \
            next(iter(f["particles"].values()))["position"]
        unit = pos["value"].attrs.get("unit", b"Angstrom")
        unit = unit.decode() if isinstance(unit, bytes) else str(unit)
        return pos["value"][()] * (10.0 if unit == "nm" else 1.0)


def expected_samples(files):
    """Every sample's (member name, coords) in the dataset's order."""
    ref = [(name, x) for name, x, _, _ in reference(files)]
    x = h5md_positions(files[1])
    ref.append(("adk", x))
    return [(name, frame) for name, xs in ref for frame in xs]


def test_every_sample_equals_h5py(files):
    ds = EnsembleDataset([*files[0], files[1]])
    samples = expected_samples(files)
    assert len(ds) == len(samples) == 9 + 6 + 11 + 5 + 8 + 98
    assert ds.names == ("1aaaA00/320/0", "1aaaA00/348/1", "2bbbB00/379/2", "3cccC00/413/0", "3cccC00/450/4", "adk")
    rng = np.random.default_rng(0)
    index = np.r_[rng.choice(len(ds), 60, replace=False), [3, 3, 136, 0]]   # unsorted, with repeats
    batch = ds.read(index)
    edges = np.r_[0, np.cumsum(batch["n_atoms"])]
    for i, k in enumerate(index.tolist()):
        name, want = samples[k]
        assert ds.names[batch["trajectory"][i]] == name
        np.testing.assert_allclose(batch["position"][edges[i]:edges[i + 1]], want, rtol=1e-6, atol=1e-4)
    assert batch["position"].shape == (edges[-1], 3)


def test_labels_frames_and_times(files):
    ds = EnsembleDataset(files[0])
    batch = ds.read(np.arange(len(ds)))
    np.testing.assert_array_equal(batch["temperature"], np.repeat([320, 348, 379, 413, 450], [9, 6, 11, 5, 8]))
    np.testing.assert_array_equal(batch["replica"], np.repeat([0, 1, 2, 0, 4], [9, 6, 11, 5, 8]))
    assert batch["domain"][:10] == ["1aaaA00"] * 9 + ["1aaaA00"] and batch["domain"][-1] == "3cccC00"
    np.testing.assert_array_equal(batch["frame"][:9], np.arange(9))
    np.testing.assert_array_equal(batch["time"][:9], (np.arange(9) + 1) * 1000.0)
    assert batch["name"] == [ds.names[m] for m in batch["trajectory"]]   # each sample names its member
    assert batch["name"][9:15] == ["1aaaA00/348/1"] * 6


def test_forces_and_atomic_numbers_of_mdcath(files):
    ds = EnsembleDataset(files[0], fields=("position", "force"), atomic_numbers=True)
    batch = ds.read(np.arange(len(ds)))
    ref = reference(files)
    want_f = np.concatenate([f.reshape(-1, 3) for _, _, f, _ in ref]) * 4.184   # kcal -> kJ, as MDAnalysis
    want_z = np.concatenate([np.tile(z, len(x)) for _, x, _, z in ref])
    np.testing.assert_allclose(batch["force"], want_f, rtol=1e-6)
    np.testing.assert_array_equal(batch["z"], want_z)
    with pytest.raises(InputFileError, match="atomic numbers"):
        EnsembleDataset([files[1]], atomic_numbers=True)


def _open_fds(paths) -> list[str]:
    """The descriptors of this process open on ``paths`` (the file each points at, one entry per descriptor)."""
    targets = {os.path.realpath(p) for p in paths}
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        if target in targets:
            out.append(target)
    return out


def test_a_process_holds_at_most_max_open_files(files):
    """Open files are bounded, not members: at most two files open at any time over a whole shuffled epoch
    with ``max_open=2`` (by the process's own descriptors), and with ``max_open=3`` the three mdCATH files of
    five members are each opened once, one descriptor per file shared by its members (the dataset's count of
    opens, its I/O counters' and the descriptors agree); closing releases every one."""
    from trajscale.ml.sampler import BlockBatchSampler

    paths = [*files[0], files[1]]
    before = _open_fds(paths)   # (other tests' datasets, not yet collected)

    def epoch(ds, seed, count):
        most = 0
        for batch in BlockBatchSampler(len(ds), 16, block=4, seed=seed):
            ds.read(batch)
            now = _open_fds(paths)
            for p in before:
                now.remove(p)
            most = max(most, count(now))
        return most

    ds = EnsembleDataset(paths, max_open=2)
    files_open = epoch(ds, 1, lambda fds: len(set(fds)))
    assert files_open == 2 and ds.most_open == 2 and ds.opens > 4   # (files were closed and opened again)
    ds.close()
    assert sorted(_open_fds(paths)) == sorted(before)
    ds = EnsembleDataset(files[0], max_open=3)
    assert len(ds.names) == 5
    assert epoch(ds, 2, len) == 3 and ds.opens == ds.stats.opens == 3
    ds.close()
    assert sorted(_open_fds(paths)) == sorted(before)


def test_a_block_batch_is_read_in_contiguous_runs(files):
    """A batch of 4 blocks of 8 consecutive frames: at most one read per block and member boundary."""
    from trajscale.ml.sampler import BlockBatchSampler

    ds = EnsembleDataset([*files[0], files[1]])
    sampler = BlockBatchSampler(len(ds), 32, block=8, seed=5)
    batch = next(iter(sampler))
    ds.read(batch)
    member = ds.locate(batch)[0]
    assert ds.stats.reads <= 4 + len(np.unique(member)), ds.stats.reads


@pytest.mark.fork
@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_torch_dataloader_epochs(files, workers):
    """torch's DataLoader over the dataset (make_loader): each epoch serves every sample once, equal to h5py;
    the same seed and epoch give the same batches, another epoch another order."""
    pytest.importorskip("torch")
    from trajscale.ml import make_loader

    samples = expected_samples(files)
    ds = EnsembleDataset([*files[0], files[1]], max_open=3)
    loader = make_loader(ds, batch_size=24, block=6, seed=11, num_workers=workers,
                         multiprocessing_context=fork_here() if workers else None)

    def epoch(e):
        loader.sampler.set_epoch(e)
        order, seen = [], []
        for batch in loader:
            edges = np.r_[0, np.cumsum(batch["n_atoms"].numpy())]
            pos = batch["position"].numpy()
            for i, (m, fr) in enumerate(zip(batch["trajectory"].tolist(), batch["frame"].tolist(), strict=True)):
                k = int(ds.starts[m]) + fr
                np.testing.assert_allclose(pos[edges[i]:edges[i + 1]], samples[k][1], rtol=1e-6, atol=1e-4)
                seen.append(k)
            order.append(tuple(seen[-len(batch["frame"]):]))
        return order, seen

    first, seen = epoch(0)
    assert sorted(seen) == list(range(len(ds)))
    assert epoch(0)[0] == first
    assert epoch(1)[0] != first
