"""``--out``'s extension decides the format, on every analysis, or the path is refused naming the formats offered.

Each analysis x each extension: the file reads back in that format (h5py, NumPy, a CSV parser,
MDAnalysis for PDB) with MDAnalysis's own numbers, or ``save`` refuses it and writes nothing.
The average structure's PDB carries the run's mean box (MDAnalysis's ``ts.dimensions`` averaged).
"""

from __future__ import annotations

import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import align, contacts, rdf, rms
from MDAnalysis.lib.distances import distance_array
from MDAnalysisTests import datafiles as D

import trajscale as ts
from tests.conftest import run_cli_here
from trajscale.errors import OutputError

warnings.filterwarnings("ignore", module="MDAnalysis")

EXTENSIONS = (".csv", ".h5", ".hdf5", ".npz", ".npy", ".pdb", ".txt", "")
A, B = "name CA and resid 1-60", "name CA and resid 100-200"
D1, D2 = "name CA and resid 1-3", "name CA and resid 10-13"   # 3 x 4 atoms: all pairs
RDF_SEL = "name OH2"


def _mda_refs() -> dict:
    """name -> (trajscale analysis, topology, trajectory, MDAnalysis's answer)."""
    u = mda.Universe(D.PSF, D.DCD)
    ca = u.select_atoms("name CA")
    ga, gb, g1, g2 = (u.select_atoms(s) for s in (A, B, D1, D2))
    dist = np.array([distance_array(g1.positions, g2.positions) for _ in u.trajectory])
    rgyr = np.array([ca.radius_of_gyration() for _ in u.trajectory])
    q = contacts.Contacts(u, select=(A, B), refgroup=(ga, gb), radius=8.0).run().results.timeseries[:, 1]
    w = mda.Universe(D.PSF_TRICLINIC, D.DCD_TRICLINIC)
    g = w.select_atoms(RDF_SEL)
    x = rdf.InterRDF(g, g, nbins=40, range=(0.0, 8.0), exclusion_block=(1, 1)).run()
    gro = mda.Universe(D.GRO, D.XTC)
    box = np.mean([t.dimensions.copy() for t in gro.trajectory], axis=0)   # (a view: copied)
    avg = align.AverageStructure(mda.Universe(D.GRO, D.XTC), select="name CA", ref_frame=0).run()
    psf_dcd = (D.PSF, D.DCD)
    return {
        "rmsd": (ts.RMSD(select="name CA"), *psf_dcd, rms.RMSD(u, select="name CA").run().results.rmsd[:, 2]),
        "rgyr": (ts.RadiusOfGyration(select="name CA"), *psf_dcd, rgyr),
        "distances": (ts.Distances(D1, D2, pbc=False), *psf_dcd, dist),   # (no box)
        "contacts": (ts.Contacts(select=(A, B), radius=8.0, pbc=False), *psf_dcd, q),
        "rmsf": (ts.RMSF(select="name CA"), *psf_dcd, rms.RMSF(ca).run().results.rmsf),
        "rdf": (ts.RDF(RDF_SEL, RDF_SEL, nbins=40, range=(0.0, 8.0), exclusion_block=(1, 1)),
                D.PSF_TRICLINIC, D.DCD_TRICLINIC, x.results.rdf),
        "average": (ts.AverageStructure(select="name CA"), D.GRO, D.XTC, (avg.results.positions, box)),
    }


@pytest.fixture(scope="module")
def runs():
    """name -> (result, reference, topology), each analysis run once, serially."""
    out = {}
    for name, (analysis, top, traj, ref) in _mda_refs().items():
        out[name] = (ts.run(analysis, top, traj, executor="serial"), ref, top)
    return out


def _csv(path) -> dict:
    with open(path) as fh:
        header = fh.readline().strip().split(",")
    table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return {h: table[:, i] for i, h in enumerate(header)} | {"_table": table}


def _arrays(path, ext) -> dict:
    if ext == ".npz":
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in f}


def read_values(name: str, path, ext: str):
    """The analysis's main values read back from ``path`` with the format's own reader."""
    if ext == ".pdb":
        return mda.Universe(str(path)).atoms.positions
    if ext == ".npy":
        a = np.load(path)
        if name in ("rmsd", "rgyr", "contacts"):
            return a[:, 2]          # the CSV's table: frame, time, value
        if name == "distances":
            return a[:, 2:].reshape(len(a), 3, 4)
        return a                    # rmsf: rmsf; average: positions
    if ext == ".csv":
        cols = _csv(path)
        if name == "distances":
            return cols["_table"][:, 2:].reshape(-1, 3, 4)
        return cols[{"contacts": "q"}.get(name, name)]
    arrays = _arrays(path, ext)
    key = {"contacts": "timeseries", "average": "positions"}.get(name, name)
    value = arrays[key]
    return value[:, 1] if name == "contacts" else value


@pytest.mark.parametrize("ext", EXTENSIONS)
@pytest.mark.parametrize("name", ["rmsd", "rgyr", "distances", "contacts", "rmsf", "rdf", "average"])
def test_extension_decides_the_format_or_is_refused(tmp_path, runs, name, ext):
    result, ref, top = runs[name]
    path = tmp_path / f"out{ext}"
    offered = result.formats
    if ext not in offered:
        with pytest.raises(OutputError) as err:
            result.save(path, **({"universe": mda.Universe(top)} if name == "average" else {}))
        msg = str(err.value)
        assert all(f in msg for f in offered), msg
        assert not path.exists() and list(tmp_path.iterdir()) == []
        return
    kw = {"universe": mda.Universe(top)} if name == "average" and ext == ".pdb" else {}
    result.save(path, **kw)
    got = read_values(name, path, ext)
    expect = ref[0] if name == "average" else ref
    tol = 1e-3 if ext in (".pdb", ".csv") else 1e-4   # PDB keeps 3 decimals
    np.testing.assert_allclose(np.asarray(got, np.float64), expect, rtol=tol, atol=tol)
    if ext in (".h5", ".hdf5"):
        assert h5py.is_hdf5(path)
    if ext == ".csv":
        assert not h5py.is_hdf5(path)


def test_each_analysis_offers_what_fits(runs):
    """.csv for series, .h5/.hdf5 for arrays and series, .pdb for the structure, .npy/.npz where they fit."""
    for name, (result, _, _) in runs.items():
        assert {".h5", ".hdf5", ".npz"} <= set(result.formats), name
        assert (".pdb" in result.formats) == (name == "average")
        assert (".csv" in result.formats) == (name != "average")


def test_average_structure_carries_the_mean_box(tmp_path, runs):
    result, (_, box), top = runs["average"]
    np.testing.assert_allclose(result.box, box, rtol=1e-6)
    result.save(tmp_path / "avg.pdb", universe=mda.Universe(top))
    got = mda.Universe(str(tmp_path / "avg.pdb")).dimensions
    np.testing.assert_allclose(got[:3], box[:3], atol=1e-3)   # CRYST1: %9.3f lengths, %7.2f angles
    np.testing.assert_allclose(got[3:], box[3:], atol=1e-2)
    assert got[0] > 10   # not MDAnalysis's 1 A placeholder


def test_cli_average_pdb_has_the_runs_mean_box(tmp_path):
    """Over --start/--stop the box is the mean of the frames the run read."""
    proc = run_cli_here("run", "average", D.GRO, D.XTC, "--select", "name CA", "--start", "2", "--stop", "7",
                   "--out", "avg.pdb", "--executor", "serial", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr   # not a line per PDB column the topology lacks
    u = mda.Universe(D.GRO, D.XTC)
    box = np.mean([t.dimensions.copy() for t in u.trajectory[2:7]], axis=0)
    got = mda.Universe(str(tmp_path / "avg.pdb")).dimensions
    np.testing.assert_allclose(got[:3], box[:3], atol=1e-3)
    np.testing.assert_allclose(got[3:], box[3:], atol=1e-2)


@pytest.mark.parametrize("argv,ext", [
    (["rmsd", "--select", "name CA"], ".txt"),
    (["rgyr", "--select", "name CA"], ".pdb"),
    (["rmsf", "--select", "name CA"], ".dat"),
    (["average", "--select", "name CA"], ".csv"),
    (["rdf", "--select1", "name CA", "--select2", "name CA"], ".npy"),
    (["contacts", "--select1", A, "--select2", B], ".pdb"),
    (["distances", "--select1", D1, "--select2", D2], ".json"),
])
def test_cli_refuses_an_extension_before_the_run(tmp_path, argv, ext):
    proc = run_cli_here("run", argv[0], D.PSF, D.DCD, *argv[1:], "--out", f"o{ext}", "--report", "r.json",
                   cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and f"o{ext}" in errors[0] and ".h5" in errors[0], proc.stderr
    assert list(tmp_path.iterdir()) == []   # refused before the run: no report either


def test_cli_rmsd_h5_is_hdf5_and_rmsf_csv_is_csv(tmp_path):
    """The two outputs that came out in the other format: each now in the format its name says."""
    u = mda.Universe(D.PSF, D.DCD)
    proc = run_cli_here("run", "rmsd", D.PSF, D.DCD, "--select", "name CA", "--out", "r.h5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(tmp_path / "r.h5", "r") as f:
        np.testing.assert_allclose(f["rmsd"][()], rms.RMSD(u, select="name CA").run().results.rmsd[:, 2],
                                   rtol=1e-4, atol=1e-4)
    proc = run_cli_here("run", "rmsf", D.PSF, D.DCD, "--select", "name CA", "--out", "f.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not h5py.is_hdf5(tmp_path / "f.csv")
    cols = _csv(tmp_path / "f.csv")
    ca = u.select_atoms("name CA")
    np.testing.assert_array_equal(cols["atom"], ca.indices)
    np.testing.assert_allclose(cols["rmsf"], rms.RMSF(ca).run().results.rmsf, rtol=1e-4, atol=1e-4)
