"""convert reads XTC/TRR/DCD inputs in place (XDRSource, MDAPartSource): no MDAnalysis offset cache or lock file is
written beside the user's inputs, and the output is what MDAnalysis reads from them."""

from __future__ import annotations

import shutil
import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from trajscale.convert.convert import convert

warnings.filterwarnings("ignore", module="MDAnalysis")

CASES = {"xtc": (D.GRO, D.XTC), "trr": (D.GRO, D.TRR), "dcd": (D.PSF, D.DCD)}


def _mda_frames(top: str, traj: str) -> dict:
    """What MDAnalysis reads from one input: positions, velocities, forces (if any), box and time, in its units."""
    u = mda.Universe(top, traj)
    out = {"position": [], "velocity": [], "force": [], "box": [], "time": []}
    for t in u.trajectory:
        out["position"].append(t.positions.copy())
        if t.has_velocities:
            out["velocity"].append(t.velocities.copy())
        if t.has_forces:
            out["force"].append(t.forces.copy())
        if t.dimensions is not None:
            out["box"].append(t.dimensions.copy())
        out["time"].append(t.time)
    return {k: np.array(v) for k, v in out.items() if v}


def _litter(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(("_offsets.npz", ".lock")))


@pytest.mark.parametrize("executor", [None, "processes"])
@pytest.mark.parametrize("fmt", sorted(CASES))
def test_convert_writes_no_offset_cache_and_equals_mdanalysis(tmp_path, fmt, executor):
    top, original = CASES[fmt]
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    a, b = inputs / f"a.{fmt}", inputs / f"b.{fmt}"   # one run's file twice, as restarts leave them
    shutil.copy(original, a)
    shutil.copy(original, b)
    out = tmp_path / "out.h5md"
    convert(top, [str(a), str(b)], str(out), executor=executor, n_workers=2 if executor else None)
    assert _litter(inputs) == [], "MDAnalysis's offset cache or its lock was written beside the inputs"

    ref = _mda_frames(top, original)   # MDAnalysis on the untouched original (its cache, if any, lands there)
    n = len(ref["time"])
    got = mda.Universe(top, str(out))   # MDAnalysis reads the output: units as written
    assert got.trajectory.n_frames == 2 * n
    for i, t in enumerate(got.trajectory):
        np.testing.assert_allclose(t.positions, ref["position"][i % n], rtol=1e-6, atol=1e-5)
        if "box" in ref:
            np.testing.assert_allclose(t.dimensions, ref["box"][i % n], rtol=1e-6)
        else:
            assert t.dimensions is None
        if "velocity" in ref:
            np.testing.assert_allclose(t.velocities, ref["velocity"][i % n], rtol=1e-6, atol=1e-5)
        if "force" in ref:
            np.testing.assert_allclose(t.forces, ref["force"][i % n], rtol=1e-6, atol=1e-4)
    # the second copy's times continue the first's with its own spacing (steps must increase in H5MD)
    dt = ref["time"][1] - ref["time"][0]
    shift = ref["time"][-1] + dt - ref["time"][0]
    with h5py.File(out) as f:
        (g,) = f["particles"].values()
        np.testing.assert_allclose(g["position/time"][:], np.concatenate([ref["time"], ref["time"] + shift]),
                                   rtol=1e-6)
        assert np.all(np.diff(g["position/step"][:]) > 0)


def test_source_units_come_from_the_format(tmp_path):
    """--units source on an XTC read in place: nm and ps, as MDAnalysis's XTC reader declares them."""
    xtc = tmp_path / "in.xtc"
    shutil.copy(D.XTC, xtc)
    out = tmp_path / "nm.h5md"
    convert(D.GRO, [str(xtc)], str(out), units="source")
    assert _litter(tmp_path) == []
    with h5py.File(out) as f:
        pos = f["particles/all/position/value"]
        assert pos.attrs["unit"] in ("nm", b"nm")
        ref = _mda_frames(D.GRO, D.XTC)["position"]
        np.testing.assert_allclose(pos[:], ref / 10.0, rtol=1e-6, atol=1e-6)


def test_convert_and_verify_parse_the_topology_without_its_coordinates(tmp_path, monkeypatch):
    """A TPR's own coordinates (MDAnalysis's pure-Python XDR reader, ~0.4 s for 47,681 atoms) are never
    read when no selection could need them; the output still equals MDAnalysis's reading of the XTC."""
    from MDAnalysis.coordinates.TPR import TPRReader

    from trajscale.convert.verify import verify

    monkeypatch.setenv("TRAJSCALE_TOPOLOGY_CACHE", "0")
    ref = mda.Universe(D.TPR, D.XTC).trajectory.timeseries(order="fac")
    monkeypatch.setattr(TPRReader, "_read_first_frame",
                        lambda self: pytest.fail("the TPR's coordinates were read"))
    out = tmp_path / "water.h5md"
    convert(D.TPR, [D.XTC], str(out))
    assert verify(D.TPR, [D.XTC], str(out)).ok
    with h5py.File(out, "r") as f:
        np.testing.assert_allclose(f["particles/all/position/value"][()], ref, atol=1e-4)   # Angstrom


def _atoms_as_written(path) -> dict:
    with h5py.File(path) as f:
        return {k: f[f"particles/all/{k}"][()] for k in ("id", "species", "name", "resid", "segid")
                if f"particles/all/{k}" in f}


def _atoms_of(u) -> dict:
    """MDAnalysis's ids, names, residue numbers and segments, and each atom's type as a code (its index
    among the sorted distinct types): the reference both a serial and an MPI convert must write."""
    atoms = u.atoms
    return {"id": atoms.ids, "species": np.unique(atoms.types, return_inverse=True)[1], "name": atoms.names,
            "resid": atoms.resids, "segid": atoms.segids}


def _assert_atoms_written(path, u) -> None:
    got, ref = _atoms_as_written(path), _atoms_of(u)
    assert set(got) == set(ref)
    for k, v in ref.items():
        w = got[k].astype(str) if got[k].dtype.kind == "S" else got[k]
        np.testing.assert_array_equal(w, v, err_msg=k)


def test_a_serial_convert_writes_the_atoms_an_mpi_one_writes(tmp_path):
    """Ids and species were written under MPI only: the same inputs gave two different files."""
    out = tmp_path / "s.h5md"
    convert(D.PSF, [D.DCD], str(out), stop=2)
    _assert_atoms_written(out, mda.Universe(D.PSF))


def _particles(path) -> dict:
    with h5py.File(path) as f:
        g = f["particles/all"]
        return {k: g[k][()] for k in g if isinstance(g[k], h5py.Dataset)}


@pytest.mark.cli
def test_a_topology_converted_before_is_not_parsed_again_and_gives_the_same_atoms(tmp_path, monkeypatch):
    """The second convert of a topology file takes its atoms from the caches (MDAnalysis not imported in its
    process) and writes what the first wrote from MDAnalysis's Universe: ids, species, names, residues,
    masses and charges, of a selection too, each equal to MDAnalysis's own."""
    import subprocess
    import sys

    monkeypatch.setenv("TRAJSCALE_CACHE_DIR", str(tmp_path / "cache"))
    top = tmp_path / "adk.tpr"   # (a copy: a file version no other test's cache holds)
    shutil.copy(D.TPR, top)
    for name in ("cold", "warm"):
        convert(str(top), [D.XTC], str(tmp_path / f"{name}.h5md"), stop=2, select="name CA")
    cold, warm = _particles(tmp_path / "cold.h5md"), _particles(tmp_path / "warm.h5md")
    assert cold.keys() == warm.keys() >= {"id", "species", "name", "resid", "resname", "segid", "mass", "charge"}
    for k in cold:
        assert cold[k].dtype == warm[k].dtype and np.array_equal(cold[k], warm[k]), k
    ca = mda.Universe(D.TPR).select_atoms("name CA")
    np.testing.assert_array_equal(warm["id"], ca.ids)
    np.testing.assert_array_equal(warm["resname"].astype(str), ca.resnames)
    np.testing.assert_array_equal(warm["mass"], ca.masses)
    np.testing.assert_array_equal(warm["charge"], ca.charges)
    code = (f"import sys; from trajscale.convert.convert import convert; "
            f"convert({str(top)!r}, [{D.XTC!r}], {str(tmp_path / 'fresh.h5md')!r}, stop=2, select='name CA'); "
            f"print('MDAnalysis' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "False", proc.stdout + proc.stderr[-2000:]
    fresh = _particles(tmp_path / "fresh.h5md")
    assert all(np.array_equal(fresh[k], warm[k]) for k in warm)


@pytest.mark.mpi
def test_under_mpi_only_rank_0_scans_the_parts(tmp_path):
    """mpiexec -n 2 convert of three XTC parts: each part's offsets are scanned once (by rank 0) and
    shipped, never rescanned by the other rank; the file equals MDAnalysis's frames and no offset cache
    appears beside the parts."""
    pytest.importorskip("mpi4py")
    from tests.conftest import run_mpi

    parts = []
    for k in range(3):
        p = tmp_path / f"run.part{k:04d}.xtc"
        shutil.copy(D.XTC, p)
        parts.append(str(p))
    out = tmp_path / "m.h5md"
    r = run_mpi(2, ["-m", "trajscale.cli.main", "-v", "convert", D.GRO, *parts, "-o", str(out), "--no-progress"],
                timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    scans = [line for line in r.stderr.splitlines() if "frame offsets scanned" in line]
    assert sorted(s.split(": frame")[0].split()[-1] for s in scans) == sorted(parts), r.stderr[-3000:]
    ref = _mda_frames(D.GRO, D.XTC)["position"]
    with h5py.File(out) as f:
        got = f["particles/all/position/value"][()]
    np.testing.assert_allclose(got, np.concatenate([ref] * 3), rtol=0, atol=1e-5)
    assert _litter(tmp_path) == []
    _assert_atoms_written(out, mda.Universe(D.GRO))   # (what a serial convert writes: the test above)
