"""Issue 24: -q prints nothing on success, -v/-vv add debug lines, global options after the command,
no progress bars off a terminal, and the auto-executor line once.

Every command runs in a subprocess on MDAnalysisTests' real files; stderr is a pipe (not a terminal).
"""

from __future__ import annotations

import logging
import re

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.cli._helpers import convert_with_cli
from tests.conftest import run_cli, run_cli_here

#: What tqdm draws: "convert:  40%|████      | 4/10 [00:00<00:00, 181.30frame/s]".
TQDM = re.compile(r"\d+%\|")


@pytest.fixture(scope="module")
def vacuum_h5md(tmp_path_factory):
    """PSF/DCD converted by the CLI (quietly)."""
    return convert_with_cli(tmp_path_factory.mktemp("quiet") / "adk.h5md", D.PSF, D.DCD)


@pytest.mark.cli
@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_run_prints_nothing(vacuum_h5md, where):
    args = ["run", "rmsd", D.PSF, vacuum_h5md, "--select", "name CA"]
    proc = run_cli(*(["-q", *args] if where == "before" else [*args, "-q"]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == "", (proc.stdout, proc.stderr)
    loud = run_cli_here(*args)   # the same run without -q has a summary and its selection line
    assert "selection: 'name CA'" in loud.stdout and "rmsd on" in loud.stdout


@pytest.mark.cli
def test_quiet_silences_mdanalysis_warnings(tmp_path, vacuum_h5md):
    """The PDB writer warns (no CRYST1 unit cell, no elements): with -q nothing of it shows."""
    out = tmp_path / "avg.pdb"
    proc = run_cli("run", "average", D.PSF, vacuum_h5md, "--out", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == "", (proc.stdout, proc.stderr)
    # the file is what was asked for: the mean CA positions MDAnalysis's AverageStructure gives
    ref = mda.Universe(D.PSF, D.DCD)
    from MDAnalysis.analysis import align

    want = align.AverageStructure(ref, select="protein and name CA").run().results.universe
    got = mda.Universe(str(out))
    ca = want.select_atoms("protein and name CA")
    np.testing.assert_allclose(got.select_atoms("name CA").positions, ca.positions, atol=1e-3)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_quiet_convert_verify_rechunk_pack_print_nothing(tmp_path, vacuum_h5md):
    rechunked = tmp_path / "r.h5md"
    npz = tmp_path / "s.npz"
    np.savez(npz, x=np.arange(6.0).reshape(2, 3))
    for args in (["convert", D.PSF, D.DCD, "-o", str(tmp_path / "c.h5md")],
                 ["verify", D.PSF, D.DCD, vacuum_h5md],
                 ["rechunk", vacuum_h5md, "-o", str(rechunked), "--chunks", "frame"],
                 ["pack", str(npz), "-o", str(tmp_path / "p.h5")],
                 ["run", "rmsf", D.PSF, vacuum_h5md, "--out", str(tmp_path / "f.h5")]):
        proc = run_cli(*args, "-q")
        assert proc.returncode == 0, (args, proc.stderr)
        assert proc.stdout == "" and proc.stderr == "", (args, proc.stdout, proc.stderr)
    with h5py.File(vacuum_h5md) as a, h5py.File(rechunked) as b:
        pos = "particles/all/position/value"
        assert b[pos].chunks[0] == 1
        np.testing.assert_array_equal(b[pos][()], a[pos][()])


@pytest.mark.cli
def test_quiet_still_prints_errors(vacuum_h5md):
    proc = run_cli("run", "rmsd", D.PSF, vacuum_h5md, "--select", "resname NOPE", "-q")
    assert proc.returncode != 0
    assert proc.stdout == "" and "error" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.cli
def test_verbose_adds_readable_debug_lines(vacuum_h5md):
    n_ca = mda.Universe(D.PSF).select_atoms("name CA").n_atoms
    for args in (["-v", "run", "rmsd", D.PSF, vacuum_h5md, "--select", "name CA"],
                 ["run", "rmsd", D.PSF, vacuum_h5md, "--select", "name CA", "-v"]):
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stderr.splitlines()
        assert any(f"{n_ca} of 3341 atoms" in ln for ln in lines), proc.stderr   # trajscale's debug line
        assert all(ln.startswith("trajscale: ") for ln in lines), proc.stderr   # no library's lines
        assert all(len(ln) < 300 and "array(" not in ln and "\n[" not in ln for ln in lines), proc.stderr
    quiet = run_cli_here("run", "rmsd", D.PSF, vacuum_h5md, "--select", "name CA")
    assert not any(f"{n_ca} of 3341 atoms" in ln for ln in quiet.stderr.splitlines())


@pytest.mark.cli
def test_very_verbose_adds_the_libraries_lines(vacuum_h5md):
    proc = run_cli("run", "rmsd", D.PSF, vacuum_h5md, "-vv")
    assert proc.returncode == 0, proc.stderr
    loggers = {ln.split(":")[0] for ln in proc.stderr.splitlines() if re.match(r"^[\w.]+: ", ln)}
    assert "trajscale" in loggers
    assert any(name.startswith(("MDAnalysis", "h5py")) for name in loggers), loggers


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_no_progress_bars_off_a_terminal(tmp_path, vacuum_h5md):
    """stderr is a pipe here, as in a batch job's log: no tqdm bar from any command."""
    npz = [tmp_path / f"s{i}.npz" for i in range(3)]
    for i, p in enumerate(npz):
        np.savez(p, x=np.full((2, 3), float(i)))
    for args in (["convert", D.PSF, D.DCD, "-o", str(tmp_path / "c.h5md")],
                 ["verify", D.PSF, D.DCD, vacuum_h5md],
                 ["rechunk", vacuum_h5md, "-o", str(tmp_path / "r.h5md"), "--chunks", "frame"],
                 ["pack", *map(str, npz), "-o", str(tmp_path / "p.h5")],
                 ["run", "rmsd", D.PSF, vacuum_h5md]):
        proc = run_cli(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert not TQDM.search(proc.stderr) and "\r" not in proc.stderr, (args, proc.stderr)
    with h5py.File(tmp_path / "p.h5") as f:
        np.testing.assert_array_equal(f["x"][()], np.concatenate([np.load(p)["x"] for p in npz]))


def test_line_progress_logs_every_tenth(caplog, monkeypatch):
    """Off a terminal the display is a log line per 10 %: ten lines for 20 updates, none twice."""
    from trajscale import progress

    monkeypatch.setattr(progress, "PROGRESS_LINE_DELAY", 0.0)
    with caplog.at_level(logging.INFO, logger="trajscale.progress"), \
            progress.progress_bar(20, True, desc="convert", unit="frame") as bar:
        for _ in range(20):
            bar.update(1)
    got = [int(m.group(1)) for r in caplog.records if (m := re.match(r"convert: (\d+)% ", r.getMessage()))]
    assert got == list(range(10, 101, 10)), got


@pytest.mark.cli
def test_auto_executor_line_printed_once(vacuum_h5md):
    proc = run_cli("run", "rmsd", D.PSF, vacuum_h5md, "--executor", "auto")
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout + proc.stderr).count("executor auto") == 1, proc.stdout + proc.stderr
