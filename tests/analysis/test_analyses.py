"""Every analysis equals MDAnalysis's own class on three systems, on every executor and split."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import trajscale as ts
from tests.analysis.analyses_cases import SYSTEMS, case_names, cases, check
from tests.conftest import run_cli, run_cli_here, run_mpi
from trajscale.convert.convert import convert
from trajscale.errors import ConfigError, TrajscaleError
from trajscale.h5md.layout import Layout

ALL = [(s, name) for s in SYSTEMS for name in case_names(s)]


@pytest.fixture(scope="module")
def h5md_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("analyses")
    out = {}
    for name, (top, traj) in SYSTEMS.items():
        out[name] = str(d / f"{name}.h5md")
        convert(top, [traj], out[name], layout=Layout.parse("frame"))
    return out


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_parameters_are_every_case(system):
    """The names the tests are parametrized with (listed without a Universe) are every case's, in order."""
    assert case_names(system) == list(cases(system))


@pytest.mark.parametrize("system,name", ALL)
def test_serial_h5md_equals_mdanalysis(h5md_files, system, name):
    analysis, ref = cases(system)[name]
    check(ts.run(analysis, SYSTEMS[system][0], h5md_files[system], n_tasks=3), ref)


@pytest.mark.parametrize("system,name", [(s, n) for s, n in ALL if s != "adk_water_gro_xtc"])
def test_serial_mdanalysis_formats_equal_mdanalysis(system, name):
    analysis, ref = cases(system)[name]
    check(ts.run(analysis, *SYSTEMS[system], n_tasks=4), ref)


@pytest.mark.parametrize("system,name", [(s, n) for s, n in ALL if s == "triclinic_dcd"])
def test_processes_equal_mdanalysis(h5md_files, pool, system, name):
    analysis, ref = cases(system)[name]
    check(ts.run(analysis, SYSTEMS[system][0], h5md_files[system], executor=pool, n_tasks=5), ref)


@pytest.mark.parametrize("name", ["rmsf_fit", "rgyr", "average", "rdf", "contacts_hard_cut", "distance_array",
                                  "com_distance"])
def test_dask_equals_mdanalysis(h5md_files, dask_ex, name):
    system = "triclinic_dcd"
    analysis, ref = cases(system)[name]
    check(ts.run(analysis, SYSTEMS[system][0], h5md_files[system], executor=dask_ex, n_tasks=3), ref)


@pytest.mark.mpi
def test_mpi_equals_mdanalysis(tmp_path, h5md_files):
    pytest.importorskip("mpi4py")
    system = "triclinic_dcd"
    script = Path(__file__).with_name("mpi_analyses_script.py")
    proc = run_mpi(2, [str(script), system, h5md_files[system], str(tmp_path / "out.npz")], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(tmp_path / "out.npz", allow_pickle=False)
    cs = cases(system)
    names = json.loads(str(got["names"]))
    assert set(names) == set(cs)
    for name in names:
        _, ref = cs[name]
        fields = json.loads(str(got[f"{name}__fields"]))
        result = type("R", (), {f: got[f"{name}__{f}"] for f in fields})()
        check(result, ref)


def test_rmsf_split_is_exact_chan_merge(h5md_files):
    """Any split gives the float64 single-pass answer (Chan's merge), not just close to MDAnalysis."""
    system = "adk_psf_dcd"
    import MDAnalysis as mda

    u = mda.Universe(*SYSTEMS[system])
    x = u.trajectory.timeseries(u.select_atoms("name CA"), order="fac").astype(np.float64)
    expect = np.sqrt(((x - x.mean(axis=0)) ** 2).sum(axis=2).mean(axis=0))
    for k in (1, 2, 7, 98):
        r = ts.run(ts.RMSF(select="name CA"), SYSTEMS[system][0], h5md_files[system], n_tasks=k)
        np.testing.assert_allclose(r.rmsf, expect, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- user functions


def test_per_frame_user_function_on_serial_and_processes(h5md_files, pool):
    from tests.analysis import user_functions as uf

    top, h5 = SYSTEMS["adk_psf_dcd"][0], h5md_files["adk_psf_dcd"]
    import MDAnalysis as mda

    x = mda.Universe(*SYSTEMS["adk_psf_dcd"]).trajectory.timeseries(order="fac").astype(np.float64)
    fn = ts.per_frame(uf.com_z)
    for ex in ("serial", pool):
        r = ts.run(ts.PerFrame(fn, select="all"), top, h5, executor=ex, n_tasks=4)
        np.testing.assert_allclose(r.values, x[..., 2].mean(axis=1), rtol=1e-6)
        r = ts.run(ts.PerFrame("tests.analysis.user_functions:extent"), top, h5, executor=ex, n_tasks=3)
        np.testing.assert_allclose(r.values, x.max(axis=1) - x.min(axis=1), rtol=1e-6)
        r = ts.run(ts.Reduce(uf.sum_xyz, uf.add), top, h5, executor=ex, n_tasks=5)
        np.testing.assert_allclose(r.value["sum"], x.sum(axis=(0, 1)), rtol=1e-9)
        assert r.value["n"] == 98 and r.report.n_tasks == 5


def test_user_functions_must_travel_by_import_path():
    with pytest.raises(ConfigError, match="top-level"):
        ts.per_frame(lambda positions, box: positions[:, 0, 0])

    def inner(positions, box):
        return positions[:, 0, 0]

    with pytest.raises(ConfigError, match="top-level"):
        ts.PerFrame(inner)
    with pytest.raises(ConfigError, match="cannot import"):
        ts.PerFrame("tests.analysis.user_functions:nope")


def test_failing_user_function_names_frames_and_worker(h5md_files, pool):
    top, h5 = SYSTEMS["adk_psf_dcd"][0], h5md_files["adk_psf_dcd"]
    with pytest.raises(TrajscaleError) as err:
        ts.run(ts.PerFrame("tests.analysis.user_functions:explode"), top, h5, executor=pool, n_tasks=2)
    msg = str(err.value)
    assert "explode" in msg and "boom" in msg and "frames" in msg


# ---------------------------------------------------------------- CLI


@pytest.mark.parametrize("argv,check_out", [
    (["rgyr", "--select", "name CA", "--out", "o.csv"], "csv"),
    (["rmsf", "--select", "name CA", "--fit-select", "backbone", "--out", "o.h5"], "h5"),
    (["average", "--select", "name CA", "--out", "o.pdb"], "pdb"),
    (["contacts", "--select1", "name CA and resid 1-60", "--select2", "name CA and resid 100-200",
      "--radius", "8", "--no-pbc", "--out", "o.csv"], "csv"),
    (["distances", "--select1", "name CA and resid 1-5", "--select2", "name CA and resid 10-14",
      "--no-pbc", "--out", "o.h5"], "h5"),
])
def test_cli_analyses_write_outputs(tmp_path, h5md_files, argv, check_out):
    top, h5 = SYSTEMS["adk_psf_dcd"][0], h5md_files["adk_psf_dcd"]
    proc = run_cli_here("run", argv[0], top, h5, *argv[1:], "--executor", "serial", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / argv[argv.index("--out") + 1]
    assert out.is_file() and out.stat().st_size > 0
    if check_out == "pdb":
        import MDAnalysis as mda
        from MDAnalysis.analysis import align

        got = mda.Universe(str(out)).atoms.positions
        ref = align.AverageStructure(mda.Universe(*SYSTEMS["adk_psf_dcd"]), select="name CA").run()
        np.testing.assert_allclose(got, ref.results.positions, atol=1e-3)   # PDB keeps 3 decimals
    if check_out == "h5":
        import h5py

        with h5py.File(out) as f:
            assert len(f.keys()) >= 2


def test_cli_rdf(tmp_path, h5md_files):
    top, h5 = SYSTEMS["triclinic_dcd"][0], h5md_files["triclinic_dcd"]
    proc = run_cli_here("run", "rdf", top, h5, "--select1", "name OH2", "--select2", "name OH2", "--nbins", "40",
                        "--range", "0", "8", "--exclusion-block", "1", "1", "--out", "g.h5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import h5py

    _, ref = cases("triclinic_dcd")["rdf"]
    with h5py.File(tmp_path / "g.h5") as f:
        result = type("R", (), {k: f[k][()] for k in ("count", "rdf", "bins")})()
    check(result, ref)


def test_fit_reference_atomgroup_and_negative_frame_as_mdanalysis(h5md_files):
    """reference= an AtomGroup: the fit selection is made within it (as AlignTraj does); ref_frame=-1 is the last."""
    import MDAnalysis as mda
    from MDAnalysis.analysis import align, rms

    top, traj = SYSTEMS["adk_psf_dcd"]
    ref_u = mda.Universe(top, traj)
    ref_group = ref_u.select_atoms("resid 1-100")
    ref_u.trajectory[5]
    mob = mda.Universe(top, traj)
    fit = "backbone and resid 1-100"
    align.AlignTraj(mob, ref_group, select=fit, in_memory=True).run()
    expect = rms.RMSF(mob.select_atoms("name CA and resid 1-100")).run().results.rmsf
    r = ts.run(ts.RMSF(select="name CA and resid 1-100", fit_select=fit, reference=ref_group, ref_frame=5),
               top, h5md_files["adk_psf_dcd"])
    np.testing.assert_allclose(r.rmsf, expect, rtol=1e-4, atol=1e-4)
    # a fit selection reaching outside the reference group is refused, as MDAnalysis refuses it
    with pytest.raises(TrajscaleError, match="atoms in the trajectory"):
        ts.run(ts.RMSF(select="name CA", fit_select="backbone", reference=ref_group), top, h5md_files["adk_psf_dcd"])
    last = mda.Universe(top, traj)
    last.trajectory[-1]
    mob = mda.Universe(top, traj)
    align.AlignTraj(mob, last, select="backbone", in_memory=True).run()
    expect = rms.RMSF(mob.select_atoms("name CA")).run().results.rmsf
    r = ts.run(ts.RMSF(select="name CA", fit_select="backbone", ref_frame=-1), top, h5md_files["adk_psf_dcd"])
    np.testing.assert_allclose(r.rmsf, expect, rtol=1e-4, atol=1e-4)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_cli_block_budget_reaches_every_analysis(tmp_path, h5md_files):
    """--max-block-mb applies to rmsf/rgyr/... as to rmsd (it was ignored there): a zero budget is refused."""
    top, h5 = SYSTEMS["adk_psf_dcd"][0], h5md_files["adk_psf_dcd"]
    proc = run_cli_here("run", "rgyr", top, h5, "--select", "name CA", "--max-block-mb", "0", cwd=tmp_path)
    assert proc.returncode != 0 and "max_block_bytes" in proc.stderr and "Traceback" not in proc.stderr
    ok = run_cli("run", "rgyr", top, h5, "--select", "name CA", "--max-block-mb", "0.01", "--executor", "serial",
                 cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
