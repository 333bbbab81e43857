"""A number an analysis gives is right or refused: a missing or degenerate box, no frames, no pairs,
no contacts, no mass; and what an analysis declares (``needs_box``, ``selections``) is what is read."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import align, contacts, rdf
from MDAnalysis.lib.distances import calc_bonds
from MDAnalysisTests import datafiles as D

import trajscale as ts
from tests.conftest import run_cli_here, run_mpi
from trajscale.analysis import ANALYSES, Analysis, FrameRows, Prepared
from trajscale.convert.convert import convert
from trajscale.errors import BadCoordinatesError, ConfigError, FrameRangeError, MissingBoxError
from trajscale.h5md.layout import Layout

warnings.filterwarnings("ignore", module="MDAnalysis")

PKG = Path(ts.__file__).parent
WATER = "name OH2"
A, B = "name OH2 and index 0:150", "name OH2 and index 180:374"


def _write_xtc(path: Path, box_of) -> Path:
    """The triclinic water DCD's 10 frames as XTC, frame i's box ``box_of(i, dimensions)`` (None: no box)."""
    u = mda.Universe(D.PSF_TRICLINIC, D.DCD_TRICLINIC)
    with mda.Writer(str(path), u.atoms.n_atoms) as w:
        for t in u.trajectory:
            t.dimensions = box_of(t.frame, t.dimensions.copy())
            w.write(u.atoms)
    return path


def _write_flat(path: Path) -> Path:
    """The water DCD's frames in cuboid boxes of 40 Å, frame 3's with an edge of zero: present, of no volume
    (an XTC or a triclinic H5MD box of no volume reads back as no box at all)."""
    u = mda.Universe(D.PSF_TRICLINIC, D.DCD_TRICLINIC)
    with ts.ParallelWriter(path, u.atoms.n_atoms, box="cuboid", topology=u) as w:
        for t in u.trajectory:
            w.write(step=t.frame, time=float(t.frame), ids=u.atoms.indices, positions=u.atoms.positions,
                    box=[40.0, 40.0, 0.0 if t.frame == 3 else 40.0, 90.0, 90.0, 90.0])
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("edges")
    out = {"nobox": _write_xtc(d / "nobox.xtc", lambda i, dims: None), "flat": _write_flat(d / "flat.h5md"),
           # frames 0-5 boxed, 6-9 not
           "mixed": _write_xtc(d / "mixed.xtc", lambda i, dims: dims if i < 6 else None)}
    out["nobox_h5"] = d / "nobox.h5md"
    convert(D.PSF_TRICLINIC, [str(out["nobox"])], str(out["nobox_h5"]), layout=Layout.parse("frame"))
    out["adk_h5"] = d / "adk.h5md"   # no box either (AdK in vacuum)
    convert(D.PSF, [D.DCD], str(out["adk_h5"]), layout=Layout.parse("frame"))
    return {k: str(v) for k, v in out.items()}


def _executor(name, pool, dask_ex):
    return {"serial": "serial", "threads": "threads", "processes": pool, "dask": dask_ex}[name]


NEEDS_BOX = {"rdf": lambda: ts.RDF(WATER, WATER, nbins=20, range=(0.0, 6.0)),
             "distances": lambda: ts.Distances(A, B),
             "contacts": lambda: ts.Contacts(select=(A, B), radius=8.0),
             "com_distance": lambda: ts.analysis.CentreOfMassDistance(A, B),
             "per_frame": lambda: ts.PerFrame("tests.analysis.user_functions:com_z", needs_box=True)}


# ---------------------------------------------------------------- a missing or degenerate box


def test_mdanalysis_refuses_an_rdf_without_a_box(files):
    """The reference: MDAnalysis's InterRDF cannot normalise by a volume of 0."""
    u = mda.Universe(D.PSF_TRICLINIC, files["nobox"])
    assert u.dimensions is None
    g = u.select_atoms(WATER)
    with pytest.raises(ZeroDivisionError):
        rdf.InterRDF(g, g, nbins=20, range=(0.0, 6.0)).run()


@pytest.mark.parametrize("executor", ["serial", "threads", "processes", "dask"])
@pytest.mark.parametrize("name", sorted(NEEDS_BOX))
def test_an_analysis_that_needs_a_box_refuses_a_frame_without_one(files, pool, dask_ex, executor, name):
    if executor in ("dask", "threads") and name not in ("rdf", "distances"):
        pytest.skip("two analyses are enough to show the Dask and threads paths")
    analysis = NEEDS_BOX[name]()
    assert analysis.needs_box
    with pytest.raises(MissingBoxError) as err:
        ts.run(analysis, D.PSF_TRICLINIC, files["nobox"], executor=_executor(executor, pool, dask_ex), n_tasks=3)
    msg = str(err.value)
    # a pool's first failing task names its own first frame: any frame here lacks a box
    first = 0 if executor == "serial" else err.value.frame
    assert msg.startswith(files["nobox"]) and f"frame {first} has no periodic box" in msg, msg
    assert 0 <= err.value.frame < 10 and "\n" not in msg


def test_the_box_is_checked_in_h5md_files_too(files):
    with pytest.raises(MissingBoxError, match="frame 0 has no periodic box"):
        ts.run(ts.RDF(WATER, WATER, nbins=20, range=(0.0, 6.0)), D.PSF_TRICLINIC, files["nobox_h5"], n_tasks=2)


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_a_box_of_zero_volume_is_refused_naming_its_frame(files, pool, dask_ex, executor):
    u = mda.Universe(D.PSF_TRICLINIC, files["flat"])
    assert [t.volume == 0 for t in u.trajectory] == [i == 3 for i in range(10)]   # MDAnalysis agrees: no volume
    with pytest.raises(MissingBoxError, match=r"frame 3 has a box of zero volume \(40, 40, 0, 90, 90, 90\)") as err:
        ts.run(ts.RDF(WATER, WATER, nbins=20, range=(0.0, 6.0)), D.PSF_TRICLINIC, files["flat"],
               executor=_executor(executor, pool, dask_ex), n_tasks=2)
    assert err.value.frame == 3


def test_a_box_is_refused_exactly_where_it_closes_no_cell():
    """Rectangular boxes are checked without making box vectors: each frame refused or kept exactly as by its
    volume (edges of zero, below zero, infinite or not a number; float32's smallest and largest; triclinic)."""
    from trajscale.analysis.base import check_boxes
    from trajscale.kernels.geometry import box_volume

    tiny, huge = float(np.finfo(np.float32).smallest_subnormal), float(np.finfo(np.float32).max)
    boxes = [[80, 80, 80, 90, 90, 90], [tiny, tiny, tiny, 90, 90, 90], [huge, huge, huge, 90, 90, 90],
             [80, 80, 0, 90, 90, 90], [80, -80, 80, 90, 90, 90], [np.inf, 80, 80, 90, 90, 90],
             [np.nan, 80, 80, 90, 90, 90], [80, 80, 80, 90, np.nan, 90], [0] * 6, [80, 80, 80, 60, 60, 90],
             [80, 80, 80, 90, 90, 180], [80, 80, 80, 60, 60, 150], [80, 80, 80, 90.00001, 90, 90]]
    for dims in boxes:
        box = np.array([[80, 80, 80, 90, 90, 90], dims], np.float32)
        kept = bool(box_volume(box)[1] > 0)
        try:
            check_boxes(box, np.array([4, 5]), "a.xtc", "rdf")
        except MissingBoxError as exc:
            assert not kept and exc.frame == 5, dims
        else:
            assert kept, dims


def test_a_box_too_large_to_sum_exactly_is_refused_naming_its_frame(tmp_path):
    """A box of (30,000 Å)³ wraps around in the exact int64 volume sum: refused, not summed to a wrong g(r)."""
    edge = 30000.0
    assert np.rint(edge**3 * 2.0**20) > 2.0**63   # what the fixed-point sum would have wrapped
    xtc = _write_xtc(tmp_path / "huge.xtc", lambda i, dims: [edge, edge, edge, 90, 90, 90] if i == 2 else dims)
    u = mda.Universe(D.PSF_TRICLINIC, str(xtc))
    assert u.trajectory[2].volume == pytest.approx(edge**3, rel=1e-6)   # MDAnalysis reads the box as written
    with pytest.raises(MissingBoxError, match=r"frame 2 has a box of 2.7e\+13 Å³, beyond") as err:
        ts.run(ts.RDF(WATER, WATER, nbins=20, range=(0.0, 6.0)), D.PSF_TRICLINIC, str(xtc), n_tasks=2)
    assert err.value.frame == 2 and err.value.path == str(xtc)


def test_a_box_missing_from_later_frames_is_refused_at_the_first(files):
    with pytest.raises(MissingBoxError, match="frame 6 has no periodic box"):
        ts.run(ts.Distances(A, B), D.PSF_TRICLINIC, files["mixed"], n_tasks=3)


def test_followed_runs_refuse_a_frame_without_a_box(files, tmp_path):
    from trajscale.follow import FollowOptions

    xtc = tmp_path / "f.xtc"
    xtc.write_bytes(Path(files["nobox"]).read_bytes())
    (tmp_path / "f.xtc.done").touch()   # finished: the follower reads every frame at its first look
    with pytest.raises(MissingBoxError, match="frame 0 has no periodic box"):
        ts.run(ts.RDF(WATER, WATER, nbins=20, range=(0.0, 6.0)), D.PSF_TRICLINIC, str(xtc),
               follow=FollowOptions(idle=30, poll=0.05))


@pytest.mark.parametrize("make", [lambda: ts.Distances(A, B, pbc=False), lambda: ts.Contacts((A, B), 8.0, pbc=False),
                                  lambda: ts.analysis.CentreOfMassDistance(A, B, pbc=False)])
def test_without_pbc_no_box_is_needed(files, make):
    analysis = make()
    assert not analysis.needs_box
    r = ts.run(analysis, D.PSF_TRICLINIC, files["nobox"], n_tasks=2)
    assert len(r.frames) == 10


def test_contacts_refuse_a_reference_without_a_box(files):
    ref = mda.Universe(D.PSF_TRICLINIC, files["nobox"])
    with pytest.raises(MissingBoxError, match="frame 0 has no periodic box"):
        ts.run(ts.Contacts((A, B), 8.0, reference=ref.atoms), D.PSF_TRICLINIC, D.DCD_TRICLINIC)


def test_average_structure_has_no_box_unless_every_frame_has_one(files):
    r = ts.run(ts.AverageStructure(select=WATER), D.PSF_TRICLINIC, files["mixed"], n_tasks=3)
    assert r.box is None
    expect = align.AverageStructure(mda.Universe(D.PSF_TRICLINIC, files["mixed"]), select=WATER).run()
    np.testing.assert_allclose(r.positions, expect.results.positions, atol=1e-4)
    full = ts.run(ts.AverageStructure(select=WATER), D.PSF_TRICLINIC, D.DCD_TRICLINIC, n_tasks=3)
    u = mda.Universe(D.PSF_TRICLINIC, D.DCD_TRICLINIC)
    np.testing.assert_allclose(full.box, np.mean([t.dimensions.astype(np.float64) for t in u.trajectory], axis=0),
                               rtol=1e-6)


def test_cli_refuses_an_rdf_without_a_box_in_one_line(files, tmp_path):
    out = tmp_path / "g.csv"
    proc = run_cli_here("run", "rdf", D.PSF_TRICLINIC, files["nobox"], "--select1", WATER, "--select2", WATER,
                        "--executor", "serial", "--out", str(out))
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and files["nobox"] in lines[0] and "frame 0 has no periodic box" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.mpi
def test_mpi_refuses_an_rdf_without_a_box(files, tmp_path):
    pytest.importorskip("mpi4py")
    out = tmp_path / "g.csv"
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "run", "rdf", D.PSF_TRICLINIC, files["nobox"], "--select1", WATER,
                       "--select2", WATER, "--executor", "mpi", "--out", str(out)], timeout=240)
    assert proc.returncode != 0
    assert files["nobox"] in proc.stderr and "frame 0 has no periodic box" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not out.exists()


# ---------------------------------------------------------------- other values that could not be computed


def test_contacts_without_a_native_contact_are_refused():
    u = mda.Universe(D.PSF_TRICLINIC, D.DCD_TRICLINIC)
    sel = ("name OH2 and index 0:6", "name OH2 and index 366:372")
    c = contacts.Contacts(u, select=sel, refgroup=tuple(u.select_atoms(s) for s in sel), radius=1.0).run()
    assert np.isnan(c.results.timeseries[:, 1]).all()   # MDAnalysis's Q: 0 / 0
    with pytest.raises(ConfigError, match="no pair .* within radius 1 Å"):
        ts.run(ts.Contacts(select=sel, radius=1.0), D.PSF_TRICLINIC, D.DCD_TRICLINIC)


def test_an_rdf_with_no_pair_is_refused():
    u = mda.Universe(D.PSF_TRICLINIC, D.DCD_TRICLINIC)
    g = u.select_atoms("index 0")
    assert np.isnan(rdf.InterRDF(g, g, nbins=5, range=(0.0, 6.0), exclusion_block=(1, 1)).run().results.rdf).all()
    with pytest.raises(ConfigError, match="no pair is left"):
        ts.run(ts.RDF("index 0", "index 0", nbins=5, range=(0.0, 6.0), exclusion_block=(1, 1)),
               D.PSF_TRICLINIC, D.DCD_TRICLINIC)


def test_an_rdf_exclusion_block_of_no_atoms_is_refused():
    """A block of 0 atoms would divide the pair count by zero (a bare ZeroDivisionError)."""
    for block in ((0, 1), (1, 0), (-1, 2), (1, 2, 3)):
        with pytest.raises(ConfigError, match="exclusion_block must be two block sizes"):
            ts.RDF(WATER, WATER, exclusion_block=block)


def _nan_reference():
    """AdK in vacuum in memory, one CA atom of frame 0 at NaN."""
    ref = mda.Universe(D.PSF, D.DCD, in_memory=True)
    ref.trajectory.coordinate_array[0, ref.select_atoms("name CA").indices[5]] = np.nan
    return ref


def test_an_rmsd_against_a_reference_with_nan_coordinates_is_refused():
    ref = _nan_reference()
    u = mda.Universe(D.PSF, D.DCD)
    from MDAnalysis.analysis import rms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = rms.RMSD(u, ref, select="name CA").run(stop=3).results.rmsd[:, 2]
    assert np.isnan(expected).all()   # MDAnalysis: every row NaN
    with pytest.raises(BadCoordinatesError, match="NaN/inf reference coordinates in frame 0"):
        ts.run(ts.RMSD(select="name CA", reference=ref), D.PSF, D.DCD, stop=3)
    rows = ts.run(ts.RMSD(select="name CA", reference=ref, allow_nan=True), D.PSF, D.DCD, stop=3)
    assert np.isnan(np.asarray(rows.rmsd)[..., -1]).all()   # asked for: NaN rows, as MDAnalysis gives


def test_contacts_against_a_reference_with_nan_coordinates_are_refused():
    with pytest.raises(BadCoordinatesError, match="NaN/inf reference coordinates in frame 0"):
        ts.run(ts.Contacts(select=("name CA and resid 1-50", "name CA and resid 100-150"), radius=8.0,
                           reference=_nan_reference(), pbc=False), D.PSF, D.DCD, stop=3)


def test_an_rdf_with_no_bins_or_an_empty_range_is_refused():
    # NumPy turns an empty range into one a bin wide (4.5, 5.5): a histogram nobody asked for
    assert np.histogram_bin_edges(np.empty(0), bins=2, range=(5.0, 5.0)).tolist() == [4.5, 5.0, 5.5]
    for kw in ({"range": (5.0, 5.0)}, {"range": (6.0, 1.0)}, {"nbins": 0}, {"range": (-1.0, 5.0)}):
        with pytest.raises(ConfigError):
            ts.RDF(WATER, WATER, **kw)


def test_massless_atoms_are_refused_where_masses_weigh(files):
    u = mda.Universe(D.PSF, D.DCD)
    u.atoms.masses = np.zeros(u.atoms.n_atoms)
    with np.errstate(all="ignore"):
        assert np.isnan(u.select_atoms("name CA").radius_of_gyration())   # MDAnalysis: 0 / 0
    com = ts.analysis.CentreOfMassDistance("name CA and resid 1-50", "name CA and resid 100-150", pbc=False)
    for analysis in (ts.RadiusOfGyration(select="name CA"), ts.RMSD(select="name CA", weights="mass"), com):
        with pytest.raises(ConfigError, match="masses .* sum to zero"):
            ts.run(analysis, u, files["adk_h5"])


@pytest.mark.parametrize("make", [lambda: ts.RMSF(select="name CA"), lambda: ts.AverageStructure(select="name CA"),
                                  lambda: ts.RDF("name CA", "name CA")])
def test_an_accumulating_analysis_over_no_frame_is_refused(make):
    """A followed run stopped before its first block reduces nothing: a mean over no frame has no value."""
    analysis = make()
    prep = Prepared(atoms=np.arange(3), state={"path": "t.xtc", "sel_atoms": np.arange(3), "n1": 3, "n2": 3})
    with pytest.warns(RuntimeWarning, match="Mean of empty slice"):
        assert np.isnan(np.mean(np.empty(0)))   # what NumPy would put in its place
    with pytest.raises(FrameRangeError, match="t.xtc: no frame was analysed"):
        analysis.result(analysis.reduce([]), prep)


# ---------------------------------------------------------------- the centre-of-mass distance


@pytest.mark.parametrize("executor", ["serial", "processes", "dask"])
def test_centre_of_mass_distance_equals_mdanalysis_with_minimum_image(pool, dask_ex, executor):
    """AdK in water: a dodecahedral box; the two centres are taken by minimum image as calc_bonds takes them."""
    u = mda.Universe(D.GRO, D.XTC)
    g1, g2 = u.select_atoms("resid 1-60"), u.select_atoms("resid 150-214")
    ref = np.array([calc_bonds(g1.center_of_mass(), g2.center_of_mass(), box=t.dimensions) for t in u.trajectory])
    geo = np.array([calc_bonds(g1.center_of_geometry(), g2.center_of_geometry(), box=t.dimensions)
                    for t in u.trajectory])
    ex = _executor(executor, pool, dask_ex)
    r = ts.run(ts.analysis.CentreOfMassDistance("resid 1-60", "resid 150-214"), D.GRO, D.XTC, executor=ex, n_tasks=3)
    np.testing.assert_allclose(r.distance, ref, rtol=1e-5)
    np.testing.assert_array_equal(r.frames, np.arange(len(u.trajectory)))
    r = ts.run(ts.analysis.CentreOfMassDistance("resid 1-60", "resid 150-214", weights=None), D.GRO, D.XTC,
               executor=ex, n_tasks=2)
    np.testing.assert_allclose(r.distance, geo, rtol=1e-5)


def test_centre_of_mass_distance_wraps_across_the_box(tmp_path):
    """Two single atoms on opposite faces of a cubic box are 2 Å apart, not 48 (float64 by hand)."""
    u = mda.Universe.empty(2, trajectory=True)
    u.add_TopologyAttr("masses", [12.0, 16.0])
    u.add_TopologyAttr("names", ["C", "O"])
    u.atoms.positions = [[1.0, 5.0, 5.0], [49.0, 5.0, 5.0]]
    u.dimensions = [50.0, 50.0, 50.0, 90.0, 90.0, 90.0]
    path = tmp_path / "two.h5md"
    with mda.Writer(str(path), 2, format="H5MD", convert_units=False) as w:
        w.write(u.atoms)
    r = ts.run(ts.analysis.CentreOfMassDistance("name C", "name O"), u, str(path), assume_units="Angstrom")
    np.testing.assert_allclose(r.distance, [2.0], rtol=1e-6)
    r = ts.run(ts.analysis.CentreOfMassDistance("name C", "name O", pbc=False), u, str(path), assume_units="Angstrom")
    np.testing.assert_allclose(r.distance, [48.0], rtol=1e-6)


# ---------------------------------------------------------------- what an analysis declares


class _OwnKeys(Analysis):
    """An analysis whose config names its selection by a key nothing else knows."""

    name = "test_own_keys"

    def __init__(self, atoms_of_interest: str = "name CA") -> None:
        self.atoms_of_interest = atoms_of_interest

    @property
    def selections(self) -> tuple[str, ...]:
        return (self.atoms_of_interest,)

    def get_config(self) -> dict:
        return {"name": self.name, "atoms_of_interest": self.atoms_of_interest}

    def prepare(self, universe, source) -> Prepared:
        return Prepared(atoms=universe.select_atoms(self.atoms_of_interest).indices)

    def map(self, block, prep) -> FrameRows:
        return FrameRows(block.frames, block.time, {"x": block.positions[:, 0, 0].astype(np.float64)})

    def result(self, reduced, prep):
        return ts.analysis.TimeSeries(reduced.frame, reduced.time, reduced.columns["x"], "x")


def test_the_layout_advice_names_the_declared_selections(files, monkeypatch):
    h5 = files["adk_h5"]
    monkeypatch.setitem(ANALYSES, _OwnKeys.name, _OwnKeys)
    r = ts.run(_OwnKeys("name CA and resid 1-20"), D.PSF, h5)
    assert r.report.source.run_read.selection == "name CA and resid 1-20"
    r = ts.run(ts.analysis.CentreOfMassDistance("resid 1-60", "resid 150-214", pbc=False), D.PSF, h5)
    assert r.report.source.run_read.selection == "(resid 1-60) or (resid 150-214)"


def test_analyses_declare_box_selections_and_frames():
    expect = {"rmsd": (False, False), "rmsf": (False, True), "rgyr": (False, False), "average": (False, True),
              "rdf": (True, True), "contacts": (True, False), "distances": (True, False),
              "com_distance": (True, False)}
    for name, (box, accumulates) in expect.items():
        cls = ANALYSES[name]
        assert "needs_box" in dir(cls) and "selections" in dir(cls) and "per_frame" in dir(cls)
        assert cls.per_frame is not accumulates, name
        if isinstance(cls.__dict__.get("needs_box"), bool):
            assert cls.needs_box is box, name
    assert Analysis.needs_box is False and Analysis.per_frame is True
    assert ts.RMSD(select={"mobile": "name CA", "reference": "name CA and resid 1:300"},
                   groupselections=["resid 5"]).selections == ("name CA", "resid 5")
    assert ts.RMSD(select=None).selections == ("all",)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_nothing_outside_the_analyses_reads_their_config_by_key():
    """The layout advice, the engine and the report ask an analysis (``selections``, ``needs_box``), never its
    config: no module outside the analyses (and the CLI's argparse names) holds their config keys."""
    theirs = {"select1", "select2", "fit_select", "groupselections"}   # no other module has a use for these
    keys = theirs | {"select", "ref_frame", "pbc"}   # these only as a lookup in a config
    bad = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        if rel.parts[0] in ("analysis", "cli") or rel == Path("plans.py"):   # (a plan's keys are the command's)
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in theirs:
                bad.append(f"{rel}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in keys:
                bad.append(f"{rel}:{node.lineno}: [{node.slice.value!r}]")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys):
                bad.append(f"{rel}:{node.lineno}: .get({node.args[0].value!r})")
    assert not bad, "\n".join(bad)
