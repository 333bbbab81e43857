"""RMSD gives ``MDAnalysis.analysis.rms.RMSD``'s ``results.rmsd`` for every argument it takes.

Four MDAnalysisTests systems (PSF/DCD; a triclinic PSF/DCD; GRO/XTC in a
triclinic box; a TPR with a foreign H5MD file), every argument combination on
the serial executor, a representative few on processes and a Dask
LocalCluster (MPI: ``test_rmsd_mpi.py``), all within 1e-4 Å.
"""

from __future__ import annotations

import functools
import json

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysis.exceptions import SelectionError as MDASelectionError

import trajscale as ts
from tests.analysis.rmsd_cases import (
    SYSTEMS,
    Case,
    all_cases,
    mdanalysis_table,
    parallel_cases,
    representative_cases,
    universe,
)
from trajscale.errors import FrameRangeError

ATOL = 1e-4


@functools.cache
def expected(system_name: str, case: Case) -> np.ndarray:
    return mdanalysis_table(SYSTEMS[system_name], case)


def trajscale_table(system_name: str, case: Case, trajectory: str | None = None, **run_kw) -> np.ndarray:
    s = SYSTEMS[system_name]
    kw = case.kwargs(s, universe(system_name, 1))
    r = ts.run(ts.RMSD(**kw), universe(system_name), trajectory or s.trajectory, **run_kw)
    return r.table()


def check(system_name: str, case: Case, got: np.ndarray) -> None:
    want = expected(system_name, case)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got[:, 0], want[:, 0])
    np.testing.assert_allclose(got[:, 1], want[:, 1], rtol=1e-6)
    np.testing.assert_allclose(got[:, 2:], want[:, 2:], atol=ATOL, rtol=0)


SERIAL = ([("adk_vacuum", c) for c in all_cases(98)]
          + [(name, c) for name in ("triclinic_water", "adk_water", "cobrotoxin_h5md")
             for c in representative_cases(SYSTEMS[name].n_frames)
             if not (c.select == "default" and name == "triclinic_water")])   # the default: a protein's CA


@pytest.mark.parametrize("system,case", SERIAL, ids=[f"{s}:{c.id}" for s, c in SERIAL])
def test_serial_equals_mdanalysis(system, case):
    check(system, case, trajscale_table(system, case))


@pytest.mark.parametrize("case", parallel_cases(98), ids=lambda c: c.id)
def test_vacuum_h5md_equals_mdanalysis(adk_vacuum_h5md, case):
    """The same cases through trajscale's own H5MD file of the PSF/DCD system."""
    check("adk_vacuum", case, trajscale_table("adk_vacuum", case, adk_vacuum_h5md, n_tasks=3))


PARALLEL = [(name, c) for name in ("adk_vacuum", "triclinic_water")
            for c in parallel_cases(SYSTEMS[name].n_frames)]


@pytest.fixture(scope="module")
def processes():
    ex = ts.make_executor("processes", 2)
    yield ex
    ex.close()


@pytest.mark.parametrize("system,case", PARALLEL, ids=[f"{s}:{c.id}" for s, c in PARALLEL])
def test_processes_equal_mdanalysis(processes, system, case):
    check(system, case, trajscale_table(system, case, executor=processes, n_tasks=4))


@pytest.fixture(scope="module")
def dask_executor(tmp_path_factory):
    distributed = pytest.importorskip("distributed")
    from tests.dask_cluster import users_cluster
    from trajscale.executors.dask import DaskExecutor

    with users_cluster(tmp_path_factory.mktemp("dask")) as cluster, distributed.Client(cluster) as client:
        ex = DaskExecutor(client=client)
        yield ex
        ex.close()


@pytest.mark.parametrize("system,case", PARALLEL, ids=[f"{s}:{c.id}" for s, c in PARALLEL])
def test_dask_equals_mdanalysis(dask_executor, system, case):
    check(system, case, trajscale_table(system, case, executor=dask_executor, n_tasks=4))


# --- arguments MDAnalysis refuses, or that used to be refused or ignored --------------------------------


@pytest.fixture(scope="module")
def vacuum():
    s = SYSTEMS["adk_vacuum"]
    return mda.Universe(s.topology, s.trajectory)


def test_mass_mismatch_names_both_selections_and_first_atom(vacuum):
    sel = ("resid 1-10 and name N", "resid 1-10 and name CA")
    with pytest.raises(MDASelectionError):   # MDAnalysis's rule refuses it too
        rms.RMSD(vacuum, select=sel)
    with pytest.raises(ts.TrajscaleError) as err:
        ts.run(ts.RMSD(select=sel), vacuum, vacuum.trajectory.filename)
    msg = str(err.value)
    assert "'resid 1-10 and name N'" in msg and "'resid 1-10 and name CA'" in msg
    assert "index 0 (4AKE MET 1 N, mass 14.007)" in msg and "index 4 (4AKE MET 1 CA, mass 12.011)" in msg


def test_reference_with_other_masses_is_refused(vacuum):
    """A reference whose masses differ beyond tol_mass was silently used before."""
    ref = mda.Universe(vacuum.filename, vacuum.trajectory.filename)
    ca = ref.select_atoms("name CA")
    ca[7].mass = 13.0
    with pytest.raises(MDASelectionError):
        rms.RMSD(vacuum, ref, select="name CA")
    with pytest.raises(ts.TrajscaleError, match=r"tol_mass=0.1 at 1 of 214 atoms.*reference index 128 .*mass 13.000"):
        ts.run(ts.RMSD(select="name CA", reference=ref), vacuum, vacuum.trajectory.filename)
    # within a larger tol_mass both compute, and agree (the reference is centred with its own masses)
    want = rms.RMSD(vacuum, ref, select="name CA", weights="mass", tol_mass=1.0).run().results.rmsd
    got = ts.run(ts.RMSD(select="name CA", reference=ref, weights="mass", tol_mass=1.0), vacuum,
                 vacuum.trajectory.filename).table()
    np.testing.assert_allclose(got[:, 2], want[:, 2], atol=ATOL)


def test_reference_atomgroup_selects_within_the_group(vacuum):
    """Selecting in the group's whole Universe found 214 CA atoms, not the group's 100."""
    ref = mda.Universe(vacuum.filename, vacuum.trajectory.filename)
    group = ref.select_atoms("resid 1-100")
    sel = {"mobile": "name CA and resid 1-100", "reference": "name CA"}
    want = rms.RMSD(vacuum, group, select=sel, ref_frame=10).run().results.rmsd
    got = ts.run(ts.RMSD(select=sel, reference=group, ref_frame=10), vacuum, vacuum.trajectory.filename).table()
    np.testing.assert_allclose(got[:, 2], want[:, 2], atol=ATOL)
    assert got[10, 2] < 1e-4


def test_group_selection_leaving_the_reference_group_is_refused(vacuum):
    """MDAnalysis counts group atoms in the reference's Universe, takes them within the group."""
    ref = mda.Universe(vacuum.filename, vacuum.trajectory.filename).select_atoms("resid 1-100")
    kw = {"select": {"mobile": "name CA and resid 1-100", "reference": "name CA"},
          "groupselections": [{"mobile": "backbone and resid 1-100", "reference": "backbone"}], "reference": ref}
    with pytest.raises(MDASelectionError):
        rms.RMSD(vacuum, **kw)
    with pytest.raises(ts.TrajscaleError, match="selects 400 atoms within the reference AtomGroup but 855"):
        ts.run(ts.RMSD(**kw), vacuum, vacuum.trajectory.filename)


@pytest.mark.parametrize("ref_frame", [98, -99, 1000])
@pytest.mark.parametrize("with_reference", [False, True])
def test_ref_frame_outside_the_reference(vacuum, ref_frame, with_reference):
    ref = mda.Universe(vacuum.filename, vacuum.trajectory.filename) if with_reference else None
    with pytest.raises(IndexError):   # MDAnalysis: a raw IndexError
        rms.RMSD(vacuum, ref, select="name CA", ref_frame=ref_frame).run()
    msg = rf"reference frame {ref_frame} \(ref_frame\) outside the 98 frames of .*adk_dims"
    with pytest.raises(FrameRangeError, match=msg):
        ts.run(ts.RMSD(select="name CA", reference=ref, ref_frame=ref_frame), vacuum, vacuum.trajectory.filename)


@pytest.mark.parametrize("kw,match", [
    ({"weights": np.ones(10)}, "weights has 10 values but the selection has 214 atoms"),
    ({"weights": "charge"}, "weights must be None, 'mass' or an array"),
    ({"weights": [[1.0, 2.0]]}, "1-D array"),
    ({"weights": np.zeros(214)}, "positive sum"),
    ({"groupselections": ["backbone"], "weights_groupselections": [None, "mass"]},
     "weights_groupselections has 2 entries but there are 1 groupselections"),
    ({"groupselections": ["backbone"], "weights_groupselections": [np.ones(3)]},
     "weights_groupselections has 3 values but the selection has 855 atoms"),
    ({"select": ["name CA"]}, "a \\(mobile, reference\\) tuple or a dict"),
    ({"groupselections": ["backbone"], "weights_groupselections": "mass"}, "False or one entry per group"),
    ({"groupselections": [None]}, "each group needs a selection"),
])
def test_bad_weights_and_selections_are_clear_errors(vacuum, kw, match):
    with pytest.raises(ts.TrajscaleError, match=match):
        ts.run(ts.RMSD(**{"select": "name CA", **kw}), vacuum, vacuum.trajectory.filename)


def test_the_default_selection_is_the_command_lines_and_all_is_mdanalysiss(vacuum):
    assert ts.RMSD().select == "protein and name CA"
    want = rms.RMSD(vacuum, select="protein and name CA").run().results.rmsd
    r = ts.run(ts.RMSD(), vacuum, vacuum.trajectory.filename)
    assert r.report.n_atoms == 214
    np.testing.assert_allclose(r.table()[:, 2], want[:, 2], atol=ATOL)
    want = rms.RMSD(vacuum).run().results.rmsd   # MDAnalysis's default, select="all"
    r = ts.run(ts.RMSD(select="all"), vacuum, vacuum.trajectory.filename)
    assert r.report.n_atoms == vacuum.atoms.n_atoms
    np.testing.assert_allclose(r.table()[:, 2], want[:, 2], atol=ATOL)


def test_weight_arrays_travel_in_the_prepared_state_not_the_config(vacuum):
    w = np.linspace(1.0, 2.0, 214)
    wg = np.linspace(1.0, 3.0, 855)
    a = ts.RMSD(select="name CA", weights=w, groupselections=["backbone"], weights_groupselections=[wg])
    cfg = a.get_config()
    assert cfg["weights"] == "array" and cfg["weights_groupselections"] == ["array"]
    assert len(json.dumps(cfg)) < 400
    from trajscale.analysis import analysis_from_config
    from trajscale.sources import open_source

    rebuilt = analysis_from_config(cfg)   # what a worker holds
    with open_source(vacuum.trajectory.filename, vacuum.filename) as src:
        prep = a.prepare(vacuum, src)
        block = src.read(0, 5, prep.atoms)
        np.testing.assert_array_equal(rebuilt.map(block, prep).columns["rmsd"], a.map(block, prep).columns["rmsd"])
    np.testing.assert_allclose(prep.state.group_weights[0], wg)
    with pytest.raises(ts.TrajscaleError, match="only stands for an array"):
        with open_source(vacuum.trajectory.filename, vacuum.filename) as src:
            rebuilt.prepare(vacuum, src)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("with_reference", [False, True])
def test_atomgroup_as_topology_selects_within_it(vacuum, processes, with_reference):
    """MDAnalysis's first argument, an AtomGroup: ``select`` applies within it, group selections to
    its whole Universe."""
    mobile = vacuum.select_atoms("resid 1-100")
    ref = mda.Universe(vacuum.filename, vacuum.trajectory.filename).select_atoms("resid 1-100") \
        if with_reference else None
    kw = {"select": "name CA", "groupselections": ["resid 1-50"], "weights": "mass", "ref_frame": 3,
          "reference": ref}
    want = rms.RMSD(mobile, **kw).run().results.rmsd
    for executor in ("serial", processes):
        r = ts.run(ts.RMSD(**kw), mobile, vacuum.trajectory.filename, executor=executor)
        np.testing.assert_allclose(r.table()[:, 2:], want[:, 2:], atol=ATOL)
