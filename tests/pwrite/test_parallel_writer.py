"""ParallelWriter under ``mpiexec -n 1, 2, 3``: equal to a serial reference, read by MDAnalysis, bad input.

The reference is the serial ``H5MDWriter`` given the frames in global order;
the frames are AdK's, read by MDAnalysis; ownership is a random scatter that
changes every frame (``frames.owned``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests.datafiles import PSF

from tests.conftest import run_mpi
from tests.pwrite.frames import adk_frames, owned
from trajscale import ParallelWriter
from trajscale.errors import ConfigError, OutputError, ParallelWriteError
from trajscale.h5md.layout import Layout
from trajscale.h5md.writer import H5MDWriter

pytest.importorskip("mpi4py")

SCRIPT = str(Path(__file__).with_name("pwrite_script.py"))
#: files the script writes -> which serial reference they equal ("" plain, "-gzip" compressed)
OUTPUTS = {f"{mode}{s}.h5md": "" for mode in ("", "frames-") for s in ("gather", "independent", "collective")}
OUTPUTS.update({"gather-gzip.h5md": "-gzip", "collective-gzip.h5md": "-gzip",
                "frames-collective-gzip.h5md": "-gzip"})
OUTPUTS.update({"gather-nompio.h5md": "", "frames-gather-nompio.h5md": ""})


@pytest.fixture(scope="module")
def data():
    return adk_frames()


def reference(path: Path, data, compression: str = "") -> Path:
    """The serial writer's file for the same frames (the same layout)."""
    u = mda.Universe(PSF)
    _, species = np.unique(u.atoms.types, return_inverse=True)
    lay = Layout.parse("auto", "gzip:1" if compression else "none")
    with H5MDWriter(path, u.atoms.n_atoms, layout=lay, fields=("position", "velocity", "force"),
                    names=u.atoms.names, ids=u.atoms.ids, masses=u.atoms.masses, charges=u.atoms.charges,
                    species=species, resids=u.atoms.resids, resnames=u.atoms.resnames, segids=u.atoms.segids) as w:
        w.write(position=data["positions"], velocity=data["velocities"], force=data["forces"],
                step=data["step"], time=data["time"], box=data["box"])
    return path


def h5_contents(path: Path) -> dict:
    """Every dataset's values, dtype, chunks and filters, and every attribute, by name."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            attrs = {k: np.asarray(v).tolist() for k, v in obj.attrs.items()}
            if isinstance(obj, h5py.Dataset):
                out[name] = (obj[()], str(obj.dtype), obj.chunks, obj.compression, attrs)
            else:
                out[name] = attrs
        f.visititems(visit)
    return out


#: The per-atom datasets: the serial writer compresses them; under MPI-IO, whose independent writes take no
#: filter, they are stored plain (the same values and type).
PER_ATOM = {"species", "mass", "charge", "id", "resid", "name", "resname", "segid"}


def assert_same_file(a: Path, b: Path) -> None:
    ca, cb = h5_contents(a), h5_contents(b)
    assert sorted(ca) == sorted(cb)
    for name in ca:
        if isinstance(ca[name], tuple):
            va, vb = ca[name], cb[name]
            if name.startswith("particles/") and name.rsplit("/", 1)[1] in PER_ATOM:
                assert (va[1], va[4]) == (vb[1], vb[4]), name
            else:
                assert va[1:] == vb[1:], name
            assert va[0].shape == vb[0].shape, name
            assert va[0].tobytes() == vb[0].tobytes(), f"{name} differs"   # bit for bit
        else:
            assert ca[name] == cb[name], name


@pytest.fixture(scope="module")
def references(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("ref")
    return {"": reference(d / "plain.h5md", data), "-gzip": reference(d / "gzip.h5md", data, "gzip")}


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_strategy_equals_serial_reference(tmp_path, data, references, n):
    proc = run_mpi(n, [SCRIPT, "equal", str(tmp_path)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, comp in OUTPUTS.items():
        assert_same_file(tmp_path / name, references[comp])
    assert not list(tmp_path.glob(".*tmp*")), "temporary files left behind"
    # MDAnalysis reads the parallel file as the original frames
    u = mda.Universe(PSF, str(tmp_path / "collective.h5md"))
    assert u.trajectory.n_frames == len(data["positions"])
    for i, ts in enumerate(u.trajectory):
        np.testing.assert_array_equal(ts.positions, data["positions"][i])
        np.testing.assert_array_equal(ts.velocities, data["velocities"][i])
        np.testing.assert_array_equal(ts.forces, data["forces"][i])
        np.testing.assert_allclose(ts.dimensions, data["box"][i], atol=1e-3)
        assert ts.time == pytest.approx(data["time"][i])
        assert ts.data["step"] == data["step"][i]


def test_serial_writer_without_comm(tmp_path, data, references):
    n_frames, n_atoms = data["positions"].shape[:2]
    out = tmp_path / "serial.h5md"
    with ParallelWriter(out, n_atoms, velocities=True, forces=True, topology=mda.Universe(PSF)) as w:
        for i in range(n_frames):
            ids = owned(i, n_atoms, 1, 0)
            w.write(step=data["step"][i], time=data["time"][i], box=data["box"][i], ids=ids,
                    positions=data["positions"][i][ids], velocities=data["velocities"][i][ids],
                    forces=data["forces"][i][ids])
            assert w.n_frames == i + 1
    assert_same_file(out, references[""])


def test_serial_bad_input_leaves_nothing(tmp_path, data):
    n_atoms = data["positions"].shape[1]
    out = tmp_path / "bad.h5md"
    ids = np.arange(n_atoms)
    ids[10] = 11
    with pytest.raises(ParallelWriteError, match=r"frame 0: atom ids \[11\] \(1 in all\) given more than once "
                                                 r"\(twice by rank 0\); atom ids \[10\] \(1 in all\) given by no rank"):
        with ParallelWriter(out, n_atoms) as w:
            w.write(step=0, time=0.0, ids=ids, positions=data["positions"][0])
    assert not out.exists() and not list(tmp_path.iterdir())


def test_serial_bad_box_is_one_clear_error(tmp_path, data):
    n_atoms = data["positions"].shape[1]
    with pytest.raises(ParallelWriteError, match=r"frame 0: rank 0: box has shape \(3,\), expected \(6,\)"):
        with ParallelWriter(tmp_path / "b.h5md", n_atoms) as w:
            w.write(step=0, time=0.0, ids=np.arange(n_atoms), positions=data["positions"][0], box=[1, 2, 3])
    assert not list(tmp_path.iterdir())


def test_options_checked(tmp_path):
    with pytest.raises(ConfigError, match="unknown strategy 'fast'"):
        ParallelWriter(tmp_path / "x.h5md", 10, strategy="fast")
    with pytest.raises(ConfigError, match="unknown unit system"):
        ParallelWriter(tmp_path / "x.h5md", 10, units="furlongs")
    (tmp_path / "y.h5md").write_text("")
    with pytest.raises(OutputError, match="already exists"):
        ParallelWriter(tmp_path / "y.h5md", 10, overwrite=False)


def test_existing_output_refused_unless_overwrite(tmp_path, data):
    """The default keeps an existing file byte for byte (one OutputError naming it); overwrite=True replaces it."""
    n_atoms = data["positions"].shape[1]
    out = tmp_path / "kept.h5md"
    old = b"a user's file, not ours\n" * 100
    out.write_bytes(old)
    ids = np.arange(n_atoms)
    refusal = re.escape(f"{out}: already exists (use --overwrite to replace it)")
    with pytest.raises(OutputError, match=f"^{refusal}$"), ParallelWriter(out, n_atoms) as w:
        w.write(step=0, time=0.0, ids=ids, positions=data["positions"][0])
    assert out.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.h5md"], "temporary files left behind"
    with ParallelWriter(out, n_atoms, overwrite=True) as w:
        w.write(step=7, time=1.5, ids=ids, positions=data["positions"][0])
    u = mda.Universe(PSF, str(out))   # MDAnalysis reads the new file: one frame, frame 0's positions
    assert u.trajectory.n_frames == 1 and u.trajectory[0].data["step"] == 7
    np.testing.assert_allclose(u.atoms.positions, data["positions"][0], atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.h5md"]


@pytest.mark.mpi
def test_existing_output_refused_on_every_rank(tmp_path, data):
    """Under ``mpiexec -n 2`` every rank gets the same OutputError and the file stays as it was until
    ``overwrite=True`` replaces it."""
    out = tmp_path / "kept.h5md"
    old = b"a user's file, not ours\n" * 100
    out.write_bytes(old)
    proc = run_mpi(2, [SCRIPT, "exists", str(out)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        got = json.loads((tmp_path / f"exists-rank{r}.json").read_text())
        assert got == {"default": f"OutputError: {out}: already exists (use --overwrite to replace it)",
                       "size_after_refusal": len(old)}
    u = mda.Universe(PSF, str(out))
    assert u.trajectory.n_frames == 1
    np.testing.assert_allclose(u.atoms.positions, data["positions"][0], atol=1e-5)
    assert not list(tmp_path.glob(".*tmp*")), "temporary files left behind"


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_bad_input_same_error_on_every_rank(tmp_path, n):
    proc = run_mpi(n, [SCRIPT, "bad", str(tmp_path)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    per_rank = [json.loads((tmp_path / f"bad-rank{r}.json").read_text()) for r in range(n)]
    assert all(p == per_rank[0] for p in per_rank), "ranks disagree on the error"
    got = per_rank[0]
    last = n - 1
    for s in ("gather", "independent", "collective"):
        assert "frame 0:" in got[f"dup-{s}"] and "given more than once" in got[f"dup-{s}"]
        assert ("by ranks 0, " if n > 1 else "twice by rank 0") in got[f"dup-{s}"]
        assert "frame 0:" in got[f"missing-{s}"] and "given by no rank" in got[f"missing-{s}"]
        assert f"frame 0: rank {last}: positions has shape" in got[f"shape-{s}"]
        assert f"frame 0: rank {last}: non-finite positions for ids" in got[f"nan-{s}"]
        assert got[f"nan-unchecked-{s}"] is None
        assert "frame 2:" in got[f"late-{s}"] and "given by no rank" in got[f"late-{s}"]
        for case in ("dup", "missing", "shape", "nan"):   # the first frame never completed
            assert not (tmp_path / f"{case}-{s}.h5md").exists()
        with h5py.File(tmp_path / f"late-{s}.h5md") as f:   # two complete frames kept
            assert f["particles/all/position/step"].shape == (2,)
    assert got["frames-shape"].startswith("ParallelWriteError") and f"rank {last}, frames [{last}, {last + 1})" \
        in got["frames-shape"]
    if n > 1:
        assert "ranks 0 and 1 both write frames [0, 2)" in got["frames-overlap"]
        assert got["nompio-collective"].startswith("ParallelUnavailableError") and \
            "strategy 'collective' needs h5py built with MPI" in got["nompio-collective"]
    assert not list(tmp_path.glob(".*tmp*")), "temporary files left behind"


def test_gromacs_units_converted_like_the_serial_writer(tmp_path, data):
    """units="gromacs": data given in Å/ps, stored in nm like H5MDWriter stores it; MDAnalysis reads Å."""
    from trajscale.units import unit_system

    n_frames, n_atoms = data["positions"].shape[:2]
    ref = tmp_path / "ref.h5md"
    with H5MDWriter(ref, n_atoms, fields=("position", "velocity"), units=unit_system("gromacs")) as w:
        w.write(position=data["positions"], velocity=data["velocities"], step=data["step"], time=data["time"],
                box=data["box"])
    out = tmp_path / "nm.h5md"
    with ParallelWriter(out, n_atoms, units="gromacs", velocities=True) as w:
        for i in range(n_frames):
            ids = owned(i, n_atoms, 1, 0)
            w.write(step=data["step"][i], time=data["time"][i], box=data["box"][i], ids=ids,
                    positions=data["positions"][i][ids], velocities=data["velocities"][i][ids])
    assert_same_file(out, ref)
    with h5py.File(out) as f:
        assert f["particles/all/position/value"].attrs["unit"] == "nm"
    u = mda.Universe(PSF, str(out))
    np.testing.assert_allclose(u.trajectory[2].positions, data["positions"][2], rtol=1e-6, atol=1e-4)
