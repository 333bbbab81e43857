"""The run engine: a followed run's report has every section a finished run's has, ``executor="auto"``
is chosen the same way for every kind of run, and a report's typed record reads older reports."""

from __future__ import annotations

import json
import shutil

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import GRO, XTC

import trajscale as ts
from trajscale import executors
from trajscale.report import diagnose
from trajscale.report.payload import Payload
from trajscale.report.runfacts import ExecutorChoice, FollowFacts, IOFacts, RunFacts
from trajscale.report.timing import RunReport
from trajscale.sources.follow import DONE_SUFFIX

SELECT = "name CA"


@pytest.fixture(scope="module")
def finished_xtc(tmp_path_factory) -> str:
    """AdK in water's XTC (10 frames, 47,681 atoms), marked finished for a follower."""
    path = tmp_path_factory.mktemp("xtc") / "adk.xtc"
    shutil.copy(XTC, path)
    (path.parent / (path.name + DONE_SUFFIX)).touch()
    return str(path)


@pytest.fixture(scope="module")
def mda_rmsd() -> np.ndarray:
    return rms.RMSD(mda.Universe(GRO, XTC), select=SELECT).run().results.rmsd[:, 2]


def test_a_followed_report_has_every_section_a_finished_one_has(finished_xtc, mda_rmsd):
    """The files given, how the tasks read, the root's topology time (in its worker record and in the
    process's phases): the same in a followed run's report as in a finished run's; its advice names the
    topology given, never a placeholder."""
    finished = ts.run(ts.RMSD(select=SELECT), GRO, finished_xtc, executor="serial")
    followed = ts.run(ts.RMSD(select=SELECT), GRO, finished_xtc, executor="serial", follow=True)
    np.testing.assert_array_equal(followed.rmsd, finished.rmsd)
    np.testing.assert_allclose(followed.rmsd, mda_rmsd, atol=1e-4)
    for r in (finished, followed):
        meta = r.report.meta
        assert meta.topology == GRO and meta.trajectories == (finished_xtc,)
        assert meta.io == IOFacts(driver=None, collective_requested=False, collective=False)
        assert meta.n_tasks == r.report.n_tasks >= 1 and meta.payload is not None
        (serial,) = r.report.workers
        assert serial.t_init_top > 0, "the root's topology time is in its worker record"
        assert r.report.process["phases"]["topology"] > 0
        assert all("TOPOLOGY" not in a.message for a in diagnose(r.report).advice)
    assert finished.report.meta.follow is None
    assert followed.report.meta.follow == FollowFacts(10, "complete", "the writer marked the file complete")


def test_auto_is_chosen_the_same_way_for_a_followed_run_and_says_why(finished_xtc, mda_rmsd, monkeypatch):
    """``--executor auto`` under ``--follow`` weighs the job as a finished run does (here: the frames
    there when the run began), picks processes when the work outweighs starting them, and says so."""
    short = ts.run(ts.RMSD(select=SELECT), GRO, finished_xtc, executor="auto", n_workers=2, follow=True)
    assert short.report.executor == "serial"
    choice = short.report.meta.executor_choice
    assert choice.chosen == "serial" and "to start them" in choice.why and "10 frames there" in choice.why
    monkeypatch.setattr(executors, "MAP_S_PER_ATOM_FRAME", 1.0)   # pretend each frame costs seconds
    long = ts.run(ts.RMSD(select=SELECT), GRO, finished_xtc, executor="auto", n_workers=2, follow=True)
    assert (long.report.executor, long.report.n_workers) == ("processes", 2)
    assert long.report.meta.executor_choice.chosen == "processes"
    assert str(long.report.meta.executor_choice).startswith("auto: processes (estimated work")
    np.testing.assert_array_equal(long.rmsd, short.rmsd)
    np.testing.assert_allclose(long.rmsd, mda_rmsd, atol=1e-4)


#: A report's ``meta`` as trajscale wrote it while it was a plain dict (keys and shapes of that time).
OLD_META = {"analysis_config": {"name": "rmsd", "select": "name CA"}, "n_tasks": 4, "n_tasks_asked": 4, "step": 2,
            "io": {"driver": "mpio", "collective_requested": True, "collective": False},
            "topology": "top.gro", "trajectories": ["a.xtc", "b.xtc"],
            "payload": {"job_bytes": 100, "partial_bytes": 40, "frames": 50, "per_frame": True},
            "executor_choice": "auto: processes (estimated work 3 s; 2 workers save ~1.5 s, more than the ~0.1 s "
                               "it takes to start them (fork))",
            "follow": {"frames": 50, "ended": "idle", "why": "no new frame for 3 s", "temporary": True}}


def test_an_older_reports_meta_loads_as_the_typed_record():
    got = RunFacts.from_dict(OLD_META)
    assert got == RunFacts(
        analysis_config={"name": "rmsd", "select": "name CA"}, n_tasks=4, n_tasks_asked=4, step=2,
        io=IOFacts("mpio", True, False), topology="top.gro", trajectories=("a.xtc", "b.xtc"),
        payload=Payload(100, 40, 50, True),
        executor_choice=ExecutorChoice("processes", "estimated work 3 s; 2 workers save ~1.5 s, more than the "
                                                    "~0.1 s it takes to start them (fork)"),
        follow=FollowFacts(50, "idle", "no new frame for 3 s", temporary=True))
    again = got.to_dict()
    assert {k: v for k, v in again.items() if k != "executor_choice"} == \
        {k: v for k, v in OLD_META.items() if k != "executor_choice"}
    assert str(ExecutorChoice.from_dict(again["executor_choice"])) == OLD_META["executor_choice"]
    assert RunFacts.from_dict({}) == RunFacts() == RunFacts.from_dict(None)   # the oldest reports had none


def test_a_report_file_written_with_a_dict_meta_loads(tmp_path):
    """A JSON report from before the record: the run's facts come back typed; the record round-trips."""
    old = {"analysis": "rmsd", "executor": "processes", "n_workers": 2, "n_frames": 50, "n_atoms": 214,
           "source": {"format": "xtc"}, "t_total": 1.0, "tasks": [], "workers": [], "meta": OLD_META, "version": 1}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    report = RunReport.load(path)
    assert report.meta.trajectories == ("a.xtc", "b.xtc") and report.meta.follow.temporary
    assert report.meta.payload == Payload(100, 40, 50, True)
    report.write(tmp_path / "new.json")
    assert RunReport.load(tmp_path / "new.json").meta == report.meta


def test_the_cli_builds_one_run_options_for_both_paths(finished_xtc):
    """``run rmsd`` with and without ``--follow`` (and on a stream): one RunOptions each, the same fields
    but for ``follow``, which holds the following options the command line gave."""
    from trajscale.cli.main import parse_args
    from trajscale.cli.run import run_options
    from trajscale.runspec import FollowOptions, RunOptions

    common = ["run", "rmsd", GRO, finished_xtc, "--executor", "processes", "-n", "2", "--tasks", "3", "--no-progress"]
    finished = run_options(parse_args(common), finished_xtc)
    followed = run_options(parse_args([*common, "--follow", "--idle", "7", "--every-frames", "2"]), finished_xtc)
    stream = run_options(parse_args(["run", "rmsd", GRO, "imd://localhost:8888", "--tee", "kept.h5md"]),
                         "imd://localhost:8888")
    assert isinstance(finished, RunOptions) and finished.follow is None
    assert followed.follow == FollowOptions(every_s=30.0, every_frames=2, idle=7.0)
    assert {**vars(followed), "follow": None} == vars(finished)
    assert (finished.executor, finished.n_workers, finished.n_tasks) == ("processes", 2, 3)
    assert stream.follow == FollowOptions(tee="kept.h5md")
