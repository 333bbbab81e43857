"""mdCATH-shaped files (made with h5py in the builder's layout from AdK's PSF/DCD): each member passes the
Source conformance suite against MDAnalysis reading the same frames (h5py's arrays in a MemoryReader, the
topology parsed from the file's pdbProteinAtoms), the registry tells them from H5MD by their bytes, and every
field that does not fit the layout is refused in one line."""

from __future__ import annotations

import io
import os
import shutil
import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.coordinates.memory import MemoryReader
from MDAnalysis.lib.util import NamedStream
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.convert.convert import convert
from trajscale.errors import InputFileError, TrajscaleError
from trajscale.h5md.layout import Layout
from trajscale.mdcath.source import MDCATHSource, members, universe
from trajscale.sources import registry, source_from_config
from trajscale.storage.location import Location
from trajscale.testing import SourceConformance
from trajscale.testing.mdcath import from_universe

warnings.filterwarnings("ignore", module="MDAnalysis")

MEMBERS = (("320", "0"), ("348", "0"), ("348", "1"))
#: kcal/(mol A) in MDAnalysis's kJ/(mol A)
KCAL = 1.0 / mda.units.get_conversion_factor("force", "kJ/(mol*Angstrom)", "kcal/(mol*Angstrom)")


@pytest.fixture(scope="module")
def mdcath_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mdcath") / "mdcath_dataset_1adkA00.h5"
    return from_universe(path, mda.Universe(D.PSF, D.DCD), members=MEMBERS, n_frames=(10, 12, 7))


def reference_universe(path: str, key: str) -> mda.Universe:
    """MDAnalysis over the member as h5py reads it: the PDB text parsed by MDAnalysis, the coordinates,
    forces (in kJ) and box in a MemoryReader, times 1 ns apart from 1 ns (mdCATH's numbering)."""
    with h5py.File(path, "r") as f:
        dom = f[next(iter(f))]
        text = dom["pdbProteinAtoms"][()].decode()
        g = dom[key]
        x, fo = g["coords"][()], g["forces"][()] * KCAL
        box = np.diag(g["box"][()]) * 10.0
    u = mda.Universe(NamedStream(io.StringIO(text), "top.pdb"))
    dims = np.tile(np.r_[box, 90, 90, 90], (len(x), 1)).astype(np.float32)
    u.load_new(x, format=MemoryReader, forces=fo, dimensions=dims, dt=1000.0)
    u.trajectory.time_offset = 0.0
    return u


class TestMDCATHMember(SourceConformance):
    @pytest.fixture
    def make_source(self, mdcath_file):
        return lambda: MDCATHSource(mdcath_file, member="348/0")

    @pytest.fixture
    def universe(self, mdcath_file):
        return reference_universe(mdcath_file, "348/0")

    def test_box_and_time_equal_mdanalysis(self, source, universe):
        """mdCATH's frames are 1 ns apart from 1 ns (frame i at (i + 1) * 1000 ps), as its own converter says;
        MemoryReader numbers them from 0."""
        b = source.read(0, source.n_frames)
        np.testing.assert_allclose(b.time, [ts.time + 1000.0 for ts in universe.trajectory])
        np.testing.assert_allclose(b.box, [ts.dimensions.copy() for ts in universe.trajectory], rtol=1e-6)
        np.testing.assert_array_equal(b.step, np.arange(1, source.n_frames + 1))

    def test_strided_reads_equal_mdanalysis(self, source, universe, rng):
        n = source.n_frames
        atoms = np.unique(np.r_[0, rng.integers(0, source.n_atoms, 20), source.n_atoms - 1])
        for k in (2, 3):
            b = source.read(1, n, atoms, stride=k)
            ref = np.array([t.positions[atoms] for t in universe.trajectory[1:n:k]])
            np.testing.assert_allclose(b.positions, ref, atol=1e-5)


class TestMDCATHByLocation(TestMDCATHMember):
    """The member named after the file's name (``file.h5#320/0``), opened by the format registry."""

    n_cases = 2

    @pytest.fixture
    def make_source(self, mdcath_file):
        return lambda: registry.open_file(Location(f"{mdcath_file}#320/0"))

    @pytest.fixture
    def universe(self, mdcath_file):
        return reference_universe(mdcath_file, "320/0")


def test_registry_tells_mdcath_from_h5md(mdcath_file, tmp_path):
    h5md = tmp_path / "adk.h5md"
    convert(D.PSF, [D.DCD], str(h5md), layout=Layout.parse("frame"))
    assert registry.guess(Location(mdcath_file)).format == "MDCATH"
    assert registry.guess(Location(f"{mdcath_file}#348/1")).kind == "mdcath"
    assert registry.guess(Location(str(h5md))).format == "H5MD"
    assert MDCATHSource.guess_format(str(h5md)) is None and MDCATHSource.guess_format(D.DCD) is None


def test_members_and_labels_as_h5py_lists_them(mdcath_file):
    got = members(mdcath_file)
    with h5py.File(mdcath_file, "r") as f:
        dom = next(iter(f))
        want = [f"{t}/{r}" for t in f[dom] if isinstance(f[dom][t], h5py.Group) for r in f[dom][t]]
    assert [k for k, _ in got] == sorted(want, key=lambda k: tuple(map(int, k.split("/"))))
    assert got[1] == ("348/0", {"domain": "1adkA00", "temperature": 348, "replica": 0})
    with MDCATHSource(mdcath_file, member="348/1") as src:
        assert src.labels == {"domain": "1adkA00", "temperature": 348, "replica": 1} and src.n_frames == 7


def test_topology_is_the_pdb_text(mdcath_file):
    u = universe(mdcath_file)
    ref = mda.Universe(D.PSF, D.DCD)
    assert u.atoms.n_atoms == ref.atoms.n_atoms
    np.testing.assert_array_equal(u.atoms.names, ref.atoms.names)
    np.testing.assert_array_equal(u.atoms.resids, ref.atoms.resids)
    with MDCATHSource(mdcath_file, member="320/0") as src:
        with h5py.File(mdcath_file, "r") as f:
            np.testing.assert_array_equal(src.atomic_numbers(), f["1adkA00/z"][()])
        assert src.universe is src.universe   # (parsed once per Source)
        np.testing.assert_array_equal(src.universe.atoms.names, ref.atoms.names)


def test_a_run_on_a_member_equals_mdanalysis(mdcath_file, tmp_path):
    """trajscale run on ``file.h5#348/0`` with the file's own PDB as the topology: the radius of gyration
    MDAnalysis gives on the same frames."""
    top = tmp_path / "top.pdb"
    with h5py.File(mdcath_file, "r") as f:
        top.write_bytes(f["1adkA00/pdbProteinAtoms"][()])
    r = ts.run(ts.RadiusOfGyration("name CA"), str(top), f"{mdcath_file}#348/0", n_tasks=3)
    u = reference_universe(mdcath_file, "348/0")
    ca = u.select_atoms("name CA")
    np.testing.assert_allclose(r.rgyr, [ca.radius_of_gyration() for _ in u.trajectory], rtol=1e-5)


def test_workers_read_without_hdf5_from_the_config(mdcath_file):
    with MDCATHSource(mdcath_file, member="348/0") as src:
        cfg = src.get_config()
        want = src.read(2, 9, np.array([5, 6, 7, 3000]), fields=("position", "force"))
    assert cfg["layout"]["coords"]["offset"] > 0
    with source_from_config(cfg) as again:
        got = again.read(2, 9, np.array([5, 6, 7, 3000]), fields=("position", "force"))
    np.testing.assert_array_equal(got.positions, want.positions)
    np.testing.assert_array_equal(got.forces, want.forces)


def test_frames_in_any_order_are_read_in_one_call_as_h5py_reads_them(mdcath_file):
    """``read_frames_into`` (a batch's frames in one compiled call): frames in any order, repeats too, their
    positions and forces (in kJ) as h5py reads them, their times mdCATH's (1 ns apart from 1 ns)."""
    frames = np.array([6, 0, 3, 3, 11])
    with h5py.File(mdcath_file, "r") as f:
        g = f[next(iter(f))]["348/0"]
        x, fo = g["coords"][()][frames], g["forces"][()][frames].astype(np.float64) * KCAL
    with MDCATHSource(mdcath_file, member="348/0") as src:
        out = {k: np.full((len(frames), src.n_atoms, 3), np.nan, np.float32) for k in ("position", "force")}
        time = np.full(len(frames), np.nan)
        assert src.read_frames_into(frames, out, time)
    np.testing.assert_array_equal(out["position"], x)
    np.testing.assert_allclose(out["force"], fo, rtol=1e-6)
    np.testing.assert_array_equal(time, (frames + 1) * 1000.0)


def _copy(src: str, tmp_path, name: str = "copy.h5") -> str:
    out = str(tmp_path / name)
    shutil.copy(src, out)
    return out


def test_a_file_with_several_members_needs_one_named(mdcath_file):
    with pytest.raises(InputFileError, match=r"holds 3 trajectories .*#320/0"):
        MDCATHSource(mdcath_file)
    with pytest.raises(InputFileError, match="has no member '450/0'"):
        MDCATHSource(mdcath_file, member="450/0")


@pytest.mark.parametrize("damage,message", [
    (lambda g: g.attrs.__setitem__("numFrames", 99), "numFrames says 99 but coords holds 12 frames"),
    (lambda g: g.__delitem__("coords") or g.create_dataset("coords", data=np.zeros((12, 5, 3), np.float32)),
     "z has"),
    (lambda g: g.__delitem__("coords") or g.create_dataset("coords", data=np.zeros((12, 3341, 3), np.float32),
                                                           chunks=(1, 3341, 3), compression="gzip"),
     "chunked or compressed"),
    (lambda g: g.__delitem__("coords") or g.create_dataset("coords", data=np.zeros((12, 3341, 3), np.int32)),
     "not floating-point"),
    (lambda g: g["coords"].attrs.__setitem__("unit", "parsec"), "unit 'parsec'"),
    (lambda g: g.__delitem__("box") or g.create_dataset("box", data=np.zeros((2, 2))), "box has shape"),
])
def test_fields_that_do_not_fit_are_refused(mdcath_file, tmp_path, damage, message):
    path = _copy(mdcath_file, tmp_path)
    with h5py.File(path, "r+") as f:
        damage(f["1adkA00/348/0"])
    with pytest.raises(InputFileError, match=message):
        MDCATHSource(path, member="348/0")


def test_a_truncated_file_is_refused(mdcath_file, tmp_path):
    path = _copy(mdcath_file, tmp_path)
    with h5py.File(path, "r") as f:
        ds = f["1adkA00/450/0/coords"] if "450" in f["1adkA00"] else f["1adkA00/348/1/coords"]
        end = ds.id.get_offset() + ds.id.get_storage_size()
    with open(path, "r+b") as fh:
        fh.truncate(end - 100)
    with pytest.raises(TrajscaleError):
        MDCATHSource(path, member="348/1").read(0, 7)


def test_a_file_changed_after_its_config_is_refused(mdcath_file, tmp_path):
    path = _copy(mdcath_file, tmp_path)
    with MDCATHSource(path, member="320/0") as src:
        cfg = src.get_config()
    os.utime(path, ns=(1, 1))
    with pytest.raises(InputFileError, match="changed since"):
        source_from_config(cfg)


def test_a_glob_over_mdcath_files_is_an_ensemble_of_their_members(mdcath_file, tmp_path):
    """The ensemble's expander: one member per temperature and replica, labelled, each read by its config."""
    from trajscale.ensemble import Ensemble

    other = from_universe(tmp_path / "mdcath_dataset_2adkB00.h5", mda.Universe(D.PSF, D.DCD), domain="2adkB00",
                          members=(("450", "4"),), n_frames=5, seed=1)
    shutil.copy(mdcath_file, tmp_path / "mdcath_dataset_1adkA00.h5")
    ens = Ensemble.from_glob(str(tmp_path / "mdcath_dataset_*.h5"))
    assert ens.names == ("1adkA00/320/0", "1adkA00/348/0", "1adkA00/348/1", "2adkB00/450/4")
    assert ens["2adkB00/450/4"].labels == {"domain": "2adkB00", "temperature": 450, "replica": 4}
    with source_from_config(dict(ens["2adkB00/450/4"].source)) as src:
        with h5py.File(other, "r") as f:
            np.testing.assert_array_equal(src.read(0, 5).positions, f["2adkB00/450/4/coords"][()])


def test_a_files_members_share_one_parsed_topology_until_it_changes(mdcath_file, tmp_path):
    path = _copy(mdcath_file, tmp_path)
    first = universe(path)
    assert universe(f"{path}#348/1") is first
    os.utime(path, ns=(1, 1))   # (another version of the file: parsed anew)
    again = universe(path)
    assert again is not first and again.atoms.n_atoms == first.atoms.n_atoms
