"""CLI: --group and --assume-units on run/inspect/verify/convert, convert --units; clean one-line errors."""

from __future__ import annotations

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from tests.cli._helpers import (
    adk_positions,
    assert_clean_failure,
    in_nm,
    mda_rmsd_ca,
    write_two_groups,
    write_without_units,
)
from tests.conftest import run_cli_here
from tests.sources.test_units_and_groups import write_h5md


@pytest.fixture(scope="module")
def files(tmp_path_factory, adk_vacuum):
    d = tmp_path_factory.mktemp("cli_groups")
    pos = adk_positions(adk_vacuum)
    multi = d / "multi.h5md"
    write_two_groups(multi, pos)
    nounit = d / "nounit.h5md"
    write_without_units(nounit, pos)
    multi_nm = d / "multi_nm.h5md"
    nm = in_nm(pos)
    write_h5md(multi_nm, {"protein": nm, "solvent": nm[:, :5]}, units=None)
    return {"multi": str(multi), "nounit": str(nounit), "multi_nm": str(multi_nm), "dir": d}


@pytest.mark.cli
def test_several_groups_need_a_choice(files, adk_vacuum):
    top, multi = adk_vacuum[0], files["multi"]
    out = files["dir"] / "out.h5md"
    for args in (["run", "rmsd", top, multi, "--no-progress"],
                 ["convert", top, multi, "-o", str(out), "--no-progress"],
                 ["verify", top, multi, multi, "--no-progress"]):
        assert_clean_failure(run_cli_here(*args), multi, "protein, solvent", "--group")
    assert not out.exists()
    ok = run_cli_here("run", "rmsd", top, multi, "--group", "protein", "--select", "name CA", "--no-progress")
    assert ok.returncode == 0, ok.stderr
    ok = run_cli_here("convert", top, multi, "--group", "protein", "-o", str(out), "--no-progress")
    assert ok.returncode == 0, ok.stderr
    with h5py.File(out) as f:
        assert list(f["particles"]) == ["protein"]
    ok = run_cli_here("verify", top, multi, str(out), "--group", "protein", "--no-progress")
    assert ok.returncode == 0 and "OK" in ok.stdout, ok.stdout + ok.stderr
    assert_clean_failure(run_cli_here("run", "rmsd", top, multi, "--group", "water", "--no-progress"),
                         "no particle group 'water'")


@pytest.mark.cli
def test_inspect_lists_every_group(files):
    proc = run_cli_here("inspect", files["multi"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    protein = next(ln for ln in lines if ln.split() and ln.split()[0] == "protein")
    solvent = next(ln for ln in lines if ln.split() and ln.split()[0] == "solvent")
    assert "10 frames x 3341 atoms" in protein and "position+velocity+force" in protein
    assert "10 frames x 5 atoms" in solvent and "position" in solvent and "Angstrom" in solvent
    assert "--group" in proc.stdout
    one = run_cli_here("inspect", files["multi"], "--group", "solvent")
    assert one.returncode == 0 and "read amplification" in one.stdout and "'solvent'" in one.stdout


@pytest.mark.cli
def test_missing_units_refused_unless_stated(files, adk_vacuum):
    top, f = adk_vacuum[0], files["nounit"]
    for args in (["run", "rmsd", top, f, "--no-progress"], ["inspect", f]):
        assert_clean_failure(run_cli_here(*args), f, "particles/all/position/value has no unit attribute",
                             "--assume-units")
    csv = files["dir"] / "r.csv"
    ok = run_cli_here("run", "rmsd", top, f, "--assume-units", "nm", "--select", "name CA", "--out", str(csv),
                 "--no-progress")
    assert ok.returncode == 0, ok.stderr
    ref = mda_rmsd_ca(adk_vacuum)
    np.testing.assert_allclose(np.loadtxt(csv, delimiter=",", skiprows=1)[:, 2], ref, atol=1e-4)
    ok = run_cli_here("inspect", f, "--assume-units", "nm")
    assert ok.returncode == 0 and "assumed: nm" in ok.stdout, ok.stdout + ok.stderr
    bad = run_cli_here("inspect", f, "--assume-units", "parsec")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


@pytest.mark.cli
def test_convert_units_option(files, adk_vacuum):
    out = files["dir"] / "gmx.h5md"
    ok = run_cli_here("convert", *adk_vacuum, "-o", str(out), "--units", "gromacs", "--stop", "5", "--no-progress")
    assert ok.returncode == 0, ok.stderr
    proc = run_cli_here("inspect", str(out))
    assert "position: nm" in proc.stdout, proc.stdout
    ok = run_cli_here("verify", *adk_vacuum, str(out), "--stop", "5", "--no-progress")
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.cli
def test_groupselection_still_reports_groups(tmp_path, adk_vacuum, adk_vacuum_h5md):
    csv = tmp_path / "g.csv"
    ok = run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--groupselection", "backbone", "--out", str(csv),
                 "--no-progress")
    assert ok.returncode == 0, ok.stderr
    header = open(csv).readline()
    assert header.count(",") >= 3, header


@pytest.mark.mpi
def test_mpi_ranks_read_the_chosen_group_in_the_stated_units(files, adk_vacuum):
    """--group and --assume-units travel to every MPI rank with the source's config."""
    from tests.conftest import run_mpi

    csv = files["dir"] / "mpi.csv"
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "run", "rmsd", adk_vacuum[0], files["multi_nm"],
                       "--group", "protein", "--assume-units", "nm", "--select", "name CA",
                       "--executor", "mpi", "--out", str(csv), "--no-progress"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = mda_rmsd_ca(adk_vacuum)
    np.testing.assert_allclose(np.loadtxt(csv, delimiter=",", skiprows=1)[:, 2], ref, atol=1e-4)


@pytest.mark.cli
def test_every_analysis_reads_the_chosen_group(files, adk_vacuum):
    """run rgyr (and the other analyses sharing the run options) honour --group and --assume-units."""
    top = adk_vacuum[0]
    csv = files["dir"] / "rgyr.csv"
    assert_clean_failure(run_cli_here("run", "rgyr", top, files["multi_nm"], "--no-progress"), "protein, solvent")
    ok = run_cli_here("run", "rgyr", top, files["multi_nm"], "--group", "protein", "--assume-units", "nm",
                 "--select", "name CA", "--out", str(csv), "--no-progress")
    assert ok.returncode == 0, ok.stderr
    u = mda.Universe(*adk_vacuum)
    ca = u.select_atoms("name CA")
    ref = [ca.radius_of_gyration() for _ in u.trajectory[:10]]
    got = np.loadtxt(csv, delimiter=",", skiprows=1)
    np.testing.assert_allclose(got[:, -1], ref, rtol=1e-5)
