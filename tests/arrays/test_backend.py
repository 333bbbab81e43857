"""Trajectories as xarray Datasets, frame by frame against MDAnalysis's own readers.

Every store trajscale reads: H5MD (plain, compressed, lossy; MDAnalysisTests' cobrotoxin with
velocities and forces), a segment index, XTC and TRR chains and a GROMACS restart chain. The
reference is MDAnalysis reading the same frames (its H5MDReader on the same file, its ChainReader
over the same parts, ``continuous=True`` for the restart chain), never trajscale's own output.
"""

from __future__ import annotations

import pickle
import warnings
from typing import TYPE_CHECKING

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.convert.convert import convert
from trajscale.convert.split import split
from trajscale.h5md.layout import Layout

from ..sources.test_restart_parts import write_parts

if TYPE_CHECKING:   # the tests import xarray where they use it: at the top every pytest worker would pay it
    import xarray as xr

warnings.filterwarnings("ignore", module="MDAnalysis")


def mda_frames(universe) -> dict[str, np.ndarray]:
    """Every frame of an MDAnalysis Universe: positions, velocities, forces (where it has them), box, time."""
    out: dict[str, list] = {"positions": [], "velocities": [], "forces": [], "box": [], "time": []}
    for t in universe.trajectory:
        out["positions"].append(t.positions.copy())
        if t.has_velocities:
            out["velocities"].append(t.velocities.copy())
        if t.has_forces:
            out["forces"].append(t.forces.copy())
        out["box"].append(t.dimensions.copy() if t.dimensions is not None else None)
        out["time"].append(t.time)
    return {k: np.array(v) for k, v in out.items() if v and v[0] is not None}


def check_against(ds: xr.Dataset, universe, atol: float = 0.0) -> None:
    """``ds`` holds MDAnalysis's frames, read frame by frame (each a separate lazy read)."""
    ref = mda_frames(universe)
    assert ds.sizes["frame"] == len(ref["time"]) and ds.sizes["atom"] == universe.atoms.n_atoms
    for var in ("positions", "velocities", "forces"):
        assert (var in ds) == (var in ref), var
    assert ("box" in ds) == ("box" in ref)
    for i in range(ds.sizes["frame"]):
        for var in ("positions", "velocities", "forces", "box"):
            if var in ref:
                np.testing.assert_allclose(ds[var][i].values, ref[var][i], rtol=0, atol=atol, err_msg=f"{var} {i}")
    np.testing.assert_allclose(ds.time.values, ref["time"], rtol=1e-6, atol=1e-4)
    assert ds.positions.attrs["units"] == "Angstrom" and ds.time.attrs["units"] == "ps"


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """AdK in water (TPR/XTC, 47,681 atoms, 10 frames) as H5MD: frame chunks, gzip, lossy floats and deltas."""
    d = tmp_path_factory.mktemp("stores")
    out = {}
    for name, kw in {"plain": {"layout": Layout.parse("frame")},
                     "gzip": {"layout": Layout.parse("auto", "gzip")},
                     "lossy": {"layout": Layout.parse("auto", "gzip"), "precision": 0.01},
                     "deltas": {"layout": Layout.parse("auto", "blosc-lz4"), "precision": 0.01,
                                "encoding": "deltas"}}.items():
        out[name] = str(d / f"{name}.h5md")
        convert(D.TPR, [D.XTC], out[name], **kw)
    return out


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("kind", ["plain", "gzip", "lossy"])
def test_h5md_stores_hold_mdanalysis_h5md_readers_frames(stores, kind):
    ds = ts.open_dataset(D.TPR, stores[kind])
    check_against(ds, mda.Universe(D.TPR, stores[kind]))
    assert ds.box.attrs["units"].startswith("Angstrom")
    np.testing.assert_array_equal(ds.name.values, mda.Universe(D.TPR).atoms.names)


def test_delta_coded_store_within_its_precision_of_the_xtc(stores):
    """Delta-coded positions (which MDAnalysis's H5MD reader cannot decode) within half the 0.01 Å quantum
    of MDAnalysis's reading of the XTC they were converted from."""
    ds = ts.open_dataset(D.TPR, stores["deltas"])
    ref = mda_frames(mda.Universe(D.TPR, D.XTC))
    np.testing.assert_allclose(ds.positions.values, ref["positions"], rtol=0, atol=0.005 + 1e-4)
    np.testing.assert_allclose(ds.box.values, ref["box"], rtol=1e-6)


def test_cobrotoxin_h5md_velocities_forces_and_units():
    """MDAnalysisTests' cobrotoxin H5MD (nm, ps; velocities and forces) through the entry point."""
    import xarray as xr

    ds = xr.open_dataset(D.H5MD_xvf, engine="trajscale", topology=D.TPR_xvf)
    check_against(ds, mda.Universe(D.TPR_xvf, D.H5MD_xvf), atol=2e-4)
    with h5py.File(D.H5MD_xvf) as f:
        stored = {var: f[f"particles/trajectory/{fl}/value"].attrs["unit"]
                  for var, fl in (("positions", "position"), ("velocities", "velocity"), ("forces", "force"))}
    assert {var: ds[var].attrs.get("stored_units") for var in stored} == {k: v.decode() if isinstance(v, bytes)
                                                                          else v for k, v in stored.items()}
    assert ds.velocities.attrs["units"] == "Angstrom ps-1"
    assert ds.forces.attrs["units"] == "kJ mol-1 Angstrom-1"


def test_segments_index_is_one_trajectory_chunked_by_part(adk_vacuum_h5md, tmp_path):
    import xarray as xr

    index = split(adk_vacuum_h5md, tmp_path / "parts", 3)
    ds = xr.open_dataset(index, engine="trajscale", chunks={})
    assert ds.positions.chunks[0] == (98,)   # three parts of 1.3 MB, grouped into one Dask chunk
    check_against(ds.compute(), mda.Universe(D.PSF, D.DCD), atol=1e-5)


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    d = tmp_path_factory.mktemp("chains")
    out = {}
    for fmt, traj in (("xtc", D.XTC), ("trr", D.TRR)):
        u = mda.Universe(D.GRO, traj)
        out[fmt] = []
        for k, (a, b) in enumerate([(0, 4), (4, 7), (7, 10)]):
            path = d / f"part{k}.{fmt}"
            with mda.Writer(str(path), u.atoms.n_atoms) as w:
                for _ in u.trajectory[a:b]:
                    w.write(u.atoms)
            out[fmt].append(str(path))
    out["restart"] = write_parts(d, [(0, 10), (9, 19), (18, 28)])
    return out


@pytest.mark.parametrize("fmt", ["xtc", "trr"])
def test_xtc_and_trr_chains_hold_mdanalysis_chainreaders_frames(chains, fmt):
    ds = ts.open_dataset(D.GRO, chains[fmt], chunks={})
    assert ds.positions.chunks[0] == (10,)   # the three parts grouped into one chunk
    check_against(ds, mda.Universe(D.GRO, chains[fmt]), atol=1e-6)


def test_restart_chain_joins_as_mdanalysis_continuous(chains):
    ds = ts.open_dataset(D.PSF, chains["restart"])
    assert ds.sizes["frame"] == 28
    check_against(ds, mda.Universe(D.PSF, chains["restart"], continuous=True), atol=1e-6)


def test_selecting_a_contiguous_span_reads_only_its_slab(stores):
    """A lazy atom slice reads exactly its atoms' bytes from a frame-chunked store, never whole frames;
    a selection given at open reads only its runs in every Dask chunk."""
    ds = ts.open_dataset(D.TPR, stores["plain"])
    before = ds.trajscale.bytes_read
    got = ds.positions.isel(atom=slice(1000, 1500)).values
    assert ds.trajscale.bytes_read - before == 10 * 500 * 12
    ref = mda_frames(mda.Universe(D.TPR, stores["plain"]))["positions"][:, 1000:1500]
    np.testing.assert_array_equal(got, ref)
    protein = ts.open_dataset(D.TPR, stores["plain"], select="protein", chunks={})
    n = protein.sizes["atom"]
    assert n == 3341 and np.array_equal(protein.atom.values, np.arange(3341))
    before = protein.trajscale.bytes_read
    mean = protein.positions.mean("frame").compute(scheduler="synchronous")
    read = protein.trajscale.bytes_read - before
    assert 10 * n * 12 <= read <= 1.2 * 10 * n * 12, read
    np.testing.assert_allclose(mean.values, mda_frames(mda.Universe(D.TPR, D.XTC))["positions"][:, :n].mean(0),
                               atol=1e-4)


def test_accessor_select_matches_mdanalysis_and_refuses_what_is_gone(adk_vacuum_h5md):
    ds = ts.open_dataset(D.PSF, adk_vacuum_h5md)
    ca = ds.trajscale.select("name CA")
    u = mda.Universe(D.PSF, D.DCD)
    want = u.select_atoms("name CA")
    np.testing.assert_array_equal(ca.atom.values, want.indices)
    u.trajectory[5]
    np.testing.assert_allclose(ca.positions[5].values, want.positions, atol=1e-5)
    from trajscale.errors import SelectionError

    with pytest.raises(SelectionError, match="does not hold"):
        ca.trajscale.select("name CB")
    with pytest.raises(SelectionError, match="selects no atoms"):
        ds.trajscale.select("name XYZ")


def test_pickles_how_to_open_never_a_handle(stores):
    """A pickled Dataset carries the source's config, not an open file: it is small and reads the same."""
    ds = ts.open_dataset(D.TPR, stores["gzip"], chunks={})
    blob = pickle.dumps(ds.positions.data)
    assert len(blob) < 200_000 and b"h5py" not in blob
    back = pickle.loads(blob)
    np.testing.assert_array_equal(back[3:5, 100:200].compute(), ds.positions[3:5, 100:200].values)


def test_no_box_no_box_variable_and_frames_without_coordinates_are_refused(adk_vacuum_h5md):
    """A trajectory without a periodic box has no ``box`` (never zeros); to_h5md refuses a reduction."""
    ds = ts.open_dataset(D.PSF, adk_vacuum_h5md)
    assert "box" not in ds and "cell" not in ds.coords


@pytest.mark.parametrize("indexers", [
    {"frame": 3}, {"atom": 17}, {"frame": slice(2, 9, 3), "atom": slice(100, 40, -7)},
    {"frame": [7, 1, 1, 4], "atom": [3340, 5, 5, 2000, 0]}, {"frame": slice(None, None, -5), "spatial": [2, 0]},
    {"frame": np.array([0, 2, 4, 6]), "atom": 3340, "spatial": 1}, {"frame": slice(5, 5)},
])
def test_lazy_indexing_equals_indexing_the_loaded_dataset(adk_vacuum_h5md, indexers):
    """xarray's backend idiom (``test_orthogonal_indexing``): indexing the lazy Dataset, then loading, gives
    what loading, then indexing gives: ints, strided and reversed slices, unsorted and repeated indices."""
    import xarray as xr

    ds = ts.open_dataset(D.PSF, adk_vacuum_h5md)
    expected = ds.load().isel(indexers)
    actual = ts.open_dataset(D.PSF, adk_vacuum_h5md).isel(indexers).load()
    xr.testing.assert_identical(expected, actual)
