"""Labelled features over an ensemble of two systems (AdK: 212 residues with φ and ψ, YiiP: another count):
the long table, the arrays, the padded dataset and every file format, each trajectory against MDAnalysis's
Ramachandran run on it alone; and members sharing a topology prepared without a Universe each."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import trajscale as ts

from .conftest import universe

warnings.filterwarnings("ignore", module="MDAnalysis")


@pytest.fixture(scope="module")
def rama(replicas):
    """The sin/cos features over the ensemble, from a results folder (each trajectory saved and read back)."""
    return ts.run(ts.Ramachandran(sincos=True), replicas["catalog"], executor="threads", n_workers=2)


@pytest.fixture(scope="module")
def references(replicas):
    """name -> (features (F, 4R) float64, MDAnalysis's residues) from MDAnalysis's Ramachandran on that member."""
    # here, not at the module's top: it imports matplotlib.pyplot, which every pytest worker would pay at collection
    from MDAnalysis.analysis.dihedrals import Ramachandran as MDARamachandran
    out = {}
    for name, (top, xtc, _) in replicas["members"].items():
        u = universe(top, xtc)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = MDARamachandran(u.select_atoms("protein")).run()
        a = np.deg2rad(r.results.angles.astype(np.float64))
        sc = np.stack([np.sin(a[..., 0]), np.cos(a[..., 0]), np.sin(a[..., 1]), np.cos(a[..., 1])], axis=-1)
        out[name] = (sc.reshape(len(a), -1), r.ag2.residues)
    return out


def test_arrays_in_catalog_order_equal_mdanalysis(rama, references, replicas):
    arrays = rama.arrays()
    assert rama.names == tuple(replicas["members"])
    counts = {a.shape[1] for a in arrays}
    assert len(counts) == 2   # two systems, two feature counts
    for name, got in zip(rama.names, arrays, strict=True):
        ref, residues = references[name]
        assert got.dtype == np.float64 and got.shape == ref.shape
        np.testing.assert_allclose(got, ref, atol=2e-5)
        labels = rama.feature_labels(name)
        np.testing.assert_array_equal(labels.resid[::4], residues.resids)
        np.testing.assert_array_equal(labels.chain[::4], residues.segids)
        assert list(labels.feature[:4]) == ["sin(phi)", "cos(phi)", "sin(psi)", "cos(psi)"]


def test_long_table_one_row_per_trajectory_frame_and_feature(rama, references):
    cols = rama.columns()
    table = rama.table()
    assert table.num_rows == len(cols["value"]) == sum(r.size for r, _ in references.values())
    assert {"trajectory", "system", "replica", "frame", "time", "feature_index", "feature", "resname", "resid",
            "chain", "value"} <= set(table.column_names)
    for name, (ref, residues) in references.items():
        mine = cols["trajectory"] == name
        n_frames, n_features = ref.shape
        frame, index = cols["frame"][mine], cols["feature_index"][mine]
        np.testing.assert_array_equal(index, np.tile(np.arange(n_features), n_frames))
        np.testing.assert_allclose(cols["value"][mine], ref.reshape(-1), atol=2e-5)
        assert frame[0] == 0 and frame[-1] == n_frames - 1
        np.testing.assert_array_equal(cols["resname"][mine][:n_features:4], residues.resnames)


def test_dataset_padded_with_counts_and_labels(rama, references):
    ds = rama.dataset()
    n_f = max(r.shape[0] for r, _ in references.values())
    n_k = max(r.shape[1] for r, _ in references.values())
    assert ds["sincos"].shape == (len(references), n_f, n_k)
    for i, (name, (ref, residues)) in enumerate(references.items()):
        assert ds["trajectory"].values[i] == name
        assert int(ds["n_frames"][i]) == ref.shape[0] and int(ds["n_features"][i]) == ref.shape[1]
        np.testing.assert_allclose(ds["sincos"].values[i, :ref.shape[0], :ref.shape[1]], ref, atol=2e-5)
        assert np.isnan(ds["sincos"].values[i, ref.shape[0]:]).all()
        assert np.isnan(ds["sincos"].values[i, :, ref.shape[1]:]).all()
        np.testing.assert_array_equal(ds["resid"].values[i, :ref.shape[1]:4], residues.resids)
        assert (ds["resid"].values[i, ref.shape[1]:] == -1).all()


@pytest.mark.parametrize("ext", [".parquet", ".csv", ".nc"])
def test_every_file_format(rama, references, tmp_path, ext):
    path = rama.save(tmp_path / f"rama{ext}")
    n_rows = sum(r.size for r, _ in references.values())
    if ext == ".parquet":
        import pyarrow.parquet as pq

        t = pq.read_table(path)
        assert t.num_rows == n_rows
        np.testing.assert_array_equal(t.column("value").to_numpy(), rama.columns()["value"])
    elif ext == ".csv":
        lines = path.read_text().splitlines()
        assert len(lines) == n_rows + 1 and "feature" in lines[0].split(",")
    else:
        import xarray as xr

        with xr.open_dataset(path) as ds:
            np.testing.assert_array_equal(ds["sincos"].values, rama.dataset()["sincos"].values)
            assert list(ds["n_features"].values) == [r.shape[1] for r, _ in references.values()]


def test_in_a_plan_saved_and_resumed(replicas, references, tmp_path):
    """With RMSD beside it, saved per trajectory in a results folder and read back: the Parquet table of each."""
    out = ts.run([ts.RMSD(select="name CA"), ts.Ramachandran(sincos=True)], replicas["catalog"],
                 results=tmp_path / "res")
    rama = out[1]
    path = rama.save(tmp_path / "rama.parquet")
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    assert t.num_rows == sum(r.size for r, _ in references.values())
    for name, got in zip(rama.names, rama.arrays(), strict=True):
        np.testing.assert_allclose(got, references[name][0], atol=2e-5)
    out[0].save(tmp_path / "rmsd.parquet")


def test_members_sharing_a_topology_build_no_universe(replicas):
    """After a first run has cached the topology's selections and labels, preparing a member builds no
    Universe, and the next member with that topology is prepared on the same object."""
    from trajscale.ensemble.members import SharedTopologies
    from trajscale.sources import open_source

    top, xtc, _ = replicas["members"]["adk-0"]
    ts.run(ts.Ramachandran(), top, xtc, stop=1)   # (the caches filled)
    shared = SharedTopologies()
    for name in ("adk-0", "adk-1"):
        source = open_source(replicas["members"][name][1], top)
        try:
            prep = shared.prepare(ts.Ramachandran(), top, source)
        finally:
            source.close()
        assert prep.state["quads"].shape == (4, 424)
        kept = shared._shared.get(top)
        assert kept is not None and kept.t_build == 0, name


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_same_bits_on_every_executor(replicas, rama, executor):
    got = ts.run(ts.Ramachandran(sincos=True), replicas["catalog"], executor=executor,
                 n_workers=1 if executor == "serial" else 2, n_tasks=7)
    for a, b in zip(got.arrays(), rama.arrays(), strict=True):
        np.testing.assert_array_equal(a, b)
