"""Issue 17: a new user's first hour - errors that blame the right thing, quiet and honest output."""

from __future__ import annotations

import json

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.cli._helpers import assert_clean_failure
from tests.conftest import run_cli, run_cli_here
from trajscale.report.summary import Report
from trajscale.report.timing import RunReport

# ---------------------------------------------------------------- errors that blame the right thing


def test_bad_topology_is_named_as_the_topology():
    proc = run_cli_here("run", "rmsd", D.PSF_BAD, D.DCD, "--no-progress")
    assert_clean_failure(proc, "adk_notop_BAD.psf", "as a topology")
    assert D.DCD not in proc.stderr


@pytest.mark.parametrize("traj", [D.XTC, D.TRR, D.DCD, D.NCDF])
def test_trajectory_only_format_as_topology_is_refused(tmp_path, traj):
    out = tmp_path / "x.h5md"
    proc = run_cli_here("convert", traj, D.TPR, "-o", str(out), "--no-progress")   # arguments swapped
    assert_clean_failure(proc, traj, "trajectory format, not a topology", "--trajectory-as-topology")
    assert not out.exists()
    assert_clean_failure(run_cli_here("run", "rmsd", traj, D.XTC, "--no-progress"), "not a topology")
    assert_clean_failure(run_cli_here("verify", traj, D.XTC, str(out)), "not a topology")


def test_insisting_on_a_trajectory_as_topology_reaches_a_clear_selection_error():
    proc = run_cli_here("run", "rmsd", "--trajectory-as-topology", D.XTC, D.XTC, "--no-progress")
    assert_clean_failure(proc, "needs atom names", "adk_oplsaa.xtc has none", "TPR, PSF")
    assert "'Topology' object" not in proc.stderr


def test_insisting_converts_with_all_atoms(tmp_path):
    out = tmp_path / "x.h5md"
    proc = run_cli_here("convert", "--trajectory-as-topology", D.XTC, D.XTC, "-o", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    with h5py.File(out) as f:
        assert f["particles/all/position/value"].shape == (10, 47681, 3)


def test_output_under_a_regular_file_fails_before_any_work(tmp_path, adk_vacuum):
    plain = tmp_path / "rmsd.csv"
    plain.write_text("keep")
    for args in (["run", "rmsd", *adk_vacuum, "--out", str(plain / "x.csv")],
                 ["run", "rmsd", *adk_vacuum, "--report", str(plain / "r.json")],
                 ["convert", *adk_vacuum, "-o", str(plain / "x.h5md")]):
        proc = run_cli_here(*args, "--no-progress")
        assert_clean_failure(proc, "rmsd.csv is a file, not a directory")
        assert "frames" not in proc.stdout + proc.stderr     # failed before reading anything
        assert "truncated" not in proc.stderr
    assert plain.read_text() == "keep"


@pytest.mark.parametrize("opt", [("-n", "0"), ("-n", "-3"), ("--tasks", "0"), ("--tasks", "-1")])
def test_non_positive_counts_are_rejected(adk_vacuum, opt):
    proc = run_cli_here("run", "rmsd", *adk_vacuum, "--executor", "processes", *opt)
    assert_clean_failure(proc, opt[0], "at least 1")
    assert "rmsd on" not in proc.stdout


def test_api_rejects_non_positive_counts(adk_vacuum):
    import trajscale as ts
    from trajscale.errors import ConfigError

    with pytest.raises(ConfigError, match="at least 1"):
        ts.run(ts.RMSD(), adk_vacuum[0], adk_vacuum[1], executor="processes", n_workers=0)
    with pytest.raises(ConfigError, match="at least 1"):
        ts.run(ts.RMSD(), adk_vacuum[0], adk_vacuum[1], n_tasks=0)


@pytest.mark.cli
def test_mpi_n_without_launcher_says_single_rank(adk_vacuum_h5md, adk_vacuum):
    pytest.importorskip("mpi4py")
    proc = run_cli("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--executor", "mpi", "-n", "4", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "-n 4 does not apply to --executor mpi" in proc.stderr and "single rank" in proc.stderr
    assert "mpiexec -n 4" in proc.stderr


# ---------------------------------------------------------------- quiet, honest output


def test_quiet_convert_draws_no_progress_bar(tmp_path, adk_vacuum):
    out = tmp_path / "q.h5md"
    proc = run_cli_here("-q", "convert", *adk_vacuum, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and out.exists()
    loud = run_cli_here("convert", *adk_vacuum, "-o", str(tmp_path / "loud.h5md"))
    assert "convert" in loud.stderr       # the same command without -q does report


def test_capped_tasks_say_why_and_quiet_means_errors_only(tmp_path, adk_vacuum):
    h5 = tmp_path / "c20.h5md"
    assert run_cli_here("-q", "convert", *adk_vacuum, "-o", str(h5), "--chunks", "20").returncode == 0
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], str(h5), "--tasks", "16", "--report",
                        str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr
    n_max = -(-98 // 20)
    assert f"asked for 16 tasks but ran {n_max}" in proc.stderr and "chunks hold 20 frames" in proc.stderr
    assert "--chunks 6" in proc.stderr          # 98 frames // 16 tasks
    assert f"read in {n_max} tasks" in proc.stdout
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["meta"]["n_tasks_asked"] == 16 and rep["meta"]["n_tasks"] == n_max
    quiet = run_cli_here("-q", "run", "rmsd", adk_vacuum[0], str(h5), "--tasks", "16")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_mda_source_summary_says_whole_frames_were_decoded(adk_vacuum):
    proc = run_cli_here("run", "rmsd", *adk_vacuum, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    n_ca = len(mda.Universe(*adk_vacuum).select_atoms("protein and name CA"))
    assert f"of the {n_ca} selected atoms" in proc.stdout
    assert f"MDAnalysis decoded whole frames of 3341 atoms, {98 * 3341 * 12 / 1e9:.3f} GB" in proc.stdout
    # 98 frames take hundredths of a second: one line instead of ratios and advice read from noise
    # (issue 24; "R_comp/comm n/a" for runs that communicate nothing: tests/report/test_diagnose.py)
    assert "too short to diagnose" in proc.stdout and "R_comp/comm inf" not in proc.stdout


def test_print_report_is_the_summary(adk_vacuum_h5md, adk_vacuum):
    import trajscale as ts

    r = ts.run(ts.RMSD(), adk_vacuum[0], adk_vacuum_h5md)
    text = str(r.report)
    assert text.startswith("rmsd on serial x1: 98 frames") and "TaskTiming" not in text
    again = Report.from_dict(json.loads(json.dumps(r.report.to_dict())))
    assert again.tasks == r.report.tasks and str(again).splitlines()[0] == text.splitlines()[0]


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_dask_run_prints_no_dask_logging(tmp_path, adk_vacuum, adk_vacuum_h5md):
    pytest.importorskip("distributed")
    proc = run_cli("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--executor", "dask", "-n", "2", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr         # no "Start Nanny", no shutdown chatter, no traceback
    assert "rmsd on dask x2" in proc.stdout


@pytest.mark.cli
def test_kernels_load_before_the_first_timed_task():
    # issue 17: numba's import + cache load on a fresh Dask worker showed as 0.6 s of t_compute;
    # issue 23: the kernels are compiled ahead of time, imported before the first task, and no numba
    import subprocess
    import sys

    code = ("import sys\n"
            "from trajscale.executors.base import _analysis\n"
            "from trajscale.analysis import RMSD\n"
            "_analysis(RMSD().get_config())\n"
            "print('trajscale.kernels._superpose' in sys.modules, 'numba' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


# ---------------------------------------------------------------- help and options


def test_help_shows_defaults_and_every_option_has_text():
    for cmd, needles in ((["run", "rmsd"], ["protein and name CA", "default: auto", "--start",
                                            "--trajectory-as-topology"]),
                         (["convert"], ["--trajectory-as-topology", "--no-progress"]),
                         (["verify"], ["topology file of the source trajectories"]),
                         (["demo"], ["workers (default 2)", "default: processes"])):
        proc = run_cli_here(*cmd, "--help")
        assert proc.returncode == 0
        text = " ".join(proc.stdout.split())
        for n in needles:
            assert n in text, (cmd, n)


def _parsers(parser):
    import argparse

    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_argument_of_every_command_has_help():
    from trajscale.cli.main import build_parser

    missing = [(p.prog, a.dest) for p in _parsers(build_parser()) for a in p._actions
               if a.help is None and a.dest not in ("help", "command", "analysis")]
    assert missing == []


@pytest.mark.parametrize("codec", ["blosc", "zstd"])
def test_plugin_compression_round_trips(tmp_path, adk_vacuum, codec):
    pytest.importorskip("hdf5plugin")
    out = tmp_path / f"{codec}.h5md"
    proc = run_cli_here("convert", *adk_vacuum, "-o", str(out), "--compression", codec, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    ref = mda.Universe(*adk_vacuum)
    want = np.array([ts.positions.copy() for ts in ref.trajectory])
    from trajscale.sources import open_source

    src = open_source(str(out))
    got = src.read(0, src.n_frames).positions
    src.close()
    np.testing.assert_array_equal(got, want)
    import hdf5plugin  # noqa: F401 - MDAnalysis's H5MD reader needs the filters registered

    u = mda.Universe(adk_vacuum[0], str(out))
    np.testing.assert_array_equal(np.array([ts.positions.copy() for ts in u.trajectory]), want)
    facts = json.loads(run_cli_here("inspect", str(out), "--json").stdout)
    assert facts["compression"].startswith(codec)


def test_inspect_short_file_has_no_100_frame_block_and_no_warning_trajscale_does_not_pay(tmp_path, adk_vacuum):
    out = tmp_path / "short.h5md"
    assert run_cli_here("-q", "convert", *adk_vacuum, "-o", str(out), "--stop", "20").returncode == 0
    facts = json.loads(run_cli_here("inspect", str(out), "--json").stdout)
    assert facts["n_frames"] == 20
    assert not any("100 frames" in k for k in facts["read_amplification"])
    assert "all 20 frames" in facts["read_amplification"]
    assert facts["read_amplification"]["one frame"] == 1.0     # trajscale reads in place...
    assert facts["warnings"] == []                              # ...so no warning about it


@pytest.mark.parametrize("executor", ["serial", "processes"])
@pytest.mark.cli
def test_run_step_matches_mdanalysis(tmp_path, adk_vacuum, adk_vacuum_h5md, executor):
    from MDAnalysis.analysis import rms

    ref = rms.RMSD(mda.Universe(*adk_vacuum), select="name CA").run(start=3, stop=90, step=7).results.rmsd
    out, rep = tmp_path / "r.csv", tmp_path / "r.json"
    cli = run_cli_here if executor == "serial" else run_cli   # (workers are not forked from the test's process)
    proc = cli("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--select", "name CA", "--start", "3",
               "--stop", "90", "--step", "7", "--executor", executor, "-n", "2", "--tasks", "3",
               "--out", str(out), "--report", str(rep))
    assert proc.returncode == 0, proc.stderr
    got = np.loadtxt(out, delimiter=",", skiprows=1)
    np.testing.assert_array_equal(got[:, 0], np.arange(3, 90, 7))
    np.testing.assert_allclose(got[:, 2], ref[:, 2], atol=1e-4)
    report = RunReport.load(rep)
    assert report.n_frames == len(range(3, 90, 7)) == sum(t.frames for t in report.tasks)
    assert f"{len(range(3, 90, 7))} frames" in proc.stdout
