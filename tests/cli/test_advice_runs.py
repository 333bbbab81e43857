"""Issue 24: every command trajscale prints as advice runs as printed and does what it says, and run
advice is about the run's own atoms.

The commands are parsed out of the output of `run`, `report` and `inspect` and executed, as the
argument lists a shell would pass, by the CLI's ``main`` (in this process: what is tested is the command
line printed, not a process) on MDAnalysisTests' real files (AdK in water TPR + XTC converted to H5MD;
PSF/DCD); their outputs are checked against MDAnalysis reading the original trajectories. The runs whose
reports give the advice run in processes of their own (a report times its process's start).
"""

from __future__ import annotations

import json
import re
import shlex

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

from tests.cli._helpers import convert_with_cli
from tests.conftest import run_cli, run_cli_here

pytestmark = pytest.mark.cli

POS = "particles/all/position/value"
COMMAND = re.compile(r"(`?)(trajscale (?:convert|rechunk|inspect|run|report|split|index|verify|repair|pack) .*)")
PLACEHOLDERS = {"TOP", "TOPOLOGY", "FILE", "SEL", "PART...", "TRAJ"}


def printed_commands(text: str) -> list[list[str]]:
    """Every ``trajscale COMMAND ...`` in ``text``: up to the closing backtick when it opens with one,
    else to the end of its line; as argument lists without the leading ``trajscale``."""
    out = []
    for line in text.splitlines():
        for m in COMMAND.finditer(line):
            cmd = m.group(2).split("`")[0] if m.group(1) else m.group(2)
            out.append(shlex.split(cmd)[1:])
    return out


def run_printed(text: str, cwd) -> list[list[str]]:
    """Run every command printed in ``text`` in ``cwd``; each must exit 0."""
    cmds = printed_commands(text)
    for args in cmds:
        assert not PLACEHOLDERS & set(args), args
        proc = run_cli_here(*args, "-q", cwd=cwd)
        assert proc.returncode == 0, (args, proc.stderr)
    return cmds


@pytest.fixture(scope="module")
def water_h5md(tmp_path_factory):
    """AdK in water (47,681 atoms, 10 frames): the TPR's XTC converted to H5MD by the CLI."""
    return convert_with_cli(tmp_path_factory.mktemp("advice") / "adk_water.h5md", D.TPR, D.XTC)


def _mda_positions(top, traj, select: str) -> np.ndarray:
    u = mda.Universe(top, traj)
    ag = u.select_atoms(select)
    return np.array([ag.positions for _ in u.trajectory])


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_inspect_atoms_range_prints_a_convert_mdanalysis_accepts(tmp_path, water_h5md):
    proc = run_cli_here("inspect", water_h5md, "--pattern", "atoms:0-8813", "--topology", D.TPR)
    assert proc.returncode == 0, proc.stderr
    cmds = run_printed(proc.stdout, tmp_path)
    converts = [c for c in cmds if c[0] == "convert"]
    assert len(converts) == 1, proc.stdout
    out = tmp_path / converts[0][converts[0].index("-o") + 1]
    with h5py.File(out) as f:   # the file of just those atoms it promised, equal to MDAnalysis's
        np.testing.assert_allclose(f[POS][()], _mda_positions(D.TPR, D.XTC, "index 0:8813"), atol=1e-5)
    # the selection's own row in the read-amplification table: 8814 atoms read in place, 1.00x
    assert re.search(r"atoms:0-8813 \(8814 atoms\), all 10 frames\s+1\.00x", proc.stdout), proc.stdout


def test_inspect_without_topology_prints_no_command_it_cannot_run(tmp_path, water_h5md):
    proc = run_cli_here("inspect", water_h5md, "--pattern", "atoms:0-8813")
    assert proc.returncode == 0, proc.stderr
    run_printed(proc.stdout, tmp_path)
    assert "--topology" in proc.stdout   # says what would give the command


@pytest.mark.slow
def test_inspect_selection_row_is_the_selections_own(tmp_path, water_h5md):
    """A selection's row counts its atoms (MDAnalysis's count); the contiguous protein reads 1.00x."""
    u = mda.Universe(D.TPR)
    for k, sel in enumerate(("protein", "name CA")):
        n = u.select_atoms(sel).n_atoms
        proc = run_cli_here("inspect", water_h5md, "--pattern", f"atoms:{sel}", "--topology", D.TPR)
        assert proc.returncode == 0, proc.stderr
        row = re.search(rf"atoms:{sel} \({n} atoms\), all 10 frames\s+([\d.]+)x", proc.stdout)
        assert row, proc.stdout
        idx = u.select_atoms(sel).indices
        if np.all(np.diff(idx) == 1):   # contiguous atoms: read in place, exactly what is asked for
            assert float(row.group(1)) == 1.0
        (tmp_path / str(k)).mkdir()
        run_printed(proc.stdout, tmp_path / str(k))


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_run_advice_is_about_the_runs_selection(tmp_path, water_h5md):
    """--select protein (atoms 0..3340, contiguous) reads 1.0x: no rechunk advice, no synthetic pattern."""
    assert np.all(np.diff(mda.Universe(D.TPR).select_atoms("protein").indices) == 1)
    rep = tmp_path / "r.json"
    proc = run_cli("run", "rmsd", D.TPR, water_h5md, "--select", "protein", "--report", str(rep))
    assert proc.returncode == 0, proc.stderr
    shown = run_cli_here("report", str(rep))
    for text in (proc.stdout, shown.stdout):
        assert "scattered selection" not in text and "rechunk" not in text, text
    assert json.loads(rep.read_text())["source"]["run_read"]["amplification"] == 1.0


@pytest.mark.slow
def test_run_advice_commands_run_and_do_what_they_say(tmp_path, water_h5md):
    """The CA run's advice (a file of only its atoms) runs as printed and writes those atoms."""
    rep = tmp_path / "r.json"
    proc = run_cli("run", "rmsd", D.TPR, water_h5md, "--report", str(rep))
    assert proc.returncode == 0, proc.stderr
    shown = run_cli_here("report", str(rep))
    assert shown.returncode == 0, shown.stderr
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cmds = run_printed(proc.stdout + proc.stderr, tmp_path / "a")
    assert cmds and run_printed(shown.stdout, tmp_path / "b")
    args = next(c for c in cmds if c[0] == "convert")
    sel = args[args.index("--select") + 1]
    with h5py.File(tmp_path / "a" / args[args.index("-o") + 1]) as f:
        np.testing.assert_allclose(f[POS][()], _mda_positions(D.TPR, D.XTC, sel), atol=1e-5)
        assert f[POS].shape[1] == mda.Universe(D.TPR).select_atoms("protein and name CA").n_atoms


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_rechunk_advice_reads_what_it_promised(tmp_path):
    """Every 10th frame of a gzip file with 20-frame chunks decodes 10x what it uses; the advice's
    rechunk runs as printed, the same run on its output costs what the advice said, same RMSD."""
    gz = tmp_path / "gz.h5md"
    assert run_cli_here("-q", "convert", D.PSF, D.DCD, "-o", str(gz), "--chunks", "20", "--compression",
                        "gzip").returncode == 0
    args = ["--select", "protein", "--step", "10", "--executor", "serial"]
    rep = tmp_path / "r.json"
    proc = run_cli("run", "rmsd", D.PSF, str(gz), *args, "--report", str(rep))
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"costs ([\d.]+)x the bytes asked for; with (--chunks \S+) it would cost ([\d.]+)x", proc.stdout)
    assert m and float(m.group(1)) > 2, proc.stdout
    cmds = run_printed(proc.stdout, tmp_path)
    rechunk = next(c for c in cmds if c[0] == "rechunk")
    out = tmp_path / rechunk[rechunk.index("-o") + 1]
    rep2 = tmp_path / "r2.json"
    again = run_cli("run", "rmsd", D.PSF, str(out), *args, "--report", str(rep2), "--out", str(tmp_path / "b.csv"))
    assert again.returncode == 0, again.stderr
    got = json.loads(rep2.read_text())["source"]["run_read"]["amplification"]
    assert got == pytest.approx(float(m.group(3)), abs=0.05)
    with h5py.File(gz) as a, h5py.File(out) as b:   # the same values, compression kept
        np.testing.assert_array_equal(b[POS][()], a[POS][()])
        assert b[POS].compression == "gzip"
    want = rms.RMSD(mda.Universe(D.PSF, D.DCD), select="protein").run(step=10).results.rmsd[:, 2]
    rmsd = np.loadtxt(tmp_path / "b.csv", delimiter=",", skiprows=1, usecols=-1, ndmin=1)
    np.testing.assert_allclose(rmsd, want, atol=1e-4)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_advice_never_gives_two_rechunk_commands(tmp_path):
    """Strided reads of 20-frame gzip chunks (rechunk: --chunks frame) and too few chunk-aligned tasks
    (rechunk: smaller chunks) in one run: one rechunk command, which serves both."""
    gz = tmp_path / "gz.h5md"
    assert run_cli_here("-q", "convert", D.PSF, D.DCD, "-o", str(gz), "--chunks", "20", "--compression",
                        "gzip").returncode == 0
    rep = tmp_path / "r.json"
    proc = run_cli("run", "rmsd", D.PSF, str(gz), "--select", "protein", "--step", "5", "--executor", "processes",
                   "-n", "2", "--tasks", "3", "--report", str(rep), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    shown = run_cli_here("report", str(rep))
    assert shown.returncode == 0, shown.stderr
    advice = shown.stdout[shown.stdout.index("advice:"):]
    rechunks = {tuple(c) for c in printed_commands(advice) if c[0] == "rechunk"}
    assert len(rechunks) == 1, advice
    run_printed(advice, tmp_path)


@pytest.mark.slow(seconds=2)   # out of the quick tier: a 100-frame run and its conversion
def test_io_bound_advice_converts_the_runs_own_files(tmp_path):
    """An XTC run is I/O-bound (47,681 atoms decoded per frame for 214 CA): its convert advice names
    the run's topology and trajectory, runs as printed, and writes the trajectory MDAnalysis reads.
    AdK's 10 frames ten times over, one XTC (its frames are self-contained): 16 ms of decoding against
    0.2 ms of fitting, so a few milliseconds the scheduler takes from the fit on a loaded machine do not
    make it compute-bound (10 frames: 2.5 ms against 0.1 ms, and a 4 ms stall once did)."""
    xtc = tmp_path / "adk100.xtc"
    xtc.write_bytes(open(D.XTC, "rb").read() * 10)
    rep = tmp_path / "r.json"
    proc = run_cli("run", "rmsd", D.TPR, str(xtc), "--report", str(rep), "--executor", "serial")
    assert proc.returncode == 0, proc.stderr
    shown = run_cli_here("report", str(rep))
    cmds = [c for c in printed_commands(shown.stdout) if c[0] == "convert"]
    assert cmds and cmds[0][1:3] == [D.TPR, str(xtc)], shown.stdout
    run_printed(shown.stdout, tmp_path)
    out = tmp_path / cmds[0][cmds[0].index("-o") + 1]
    with h5py.File(out) as f:
        np.testing.assert_allclose(f[POS][()], _mda_positions(D.TPR, str(xtc), "all"), atol=1e-5)
