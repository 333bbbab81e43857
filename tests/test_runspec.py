"""RunOptions: ``trajscale.run``'s options as one frozen record; keywords and the record give the same run."""

from __future__ import annotations

import dataclasses

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import DCD, PSF

import trajscale as ts
from trajscale.errors import ConfigError
from trajscale.runspec import JobFacts, RunOptions

SELECT = "name CA"
FRAMES = dict(start=3, stop=90, step=4)


@pytest.fixture(scope="module")
def mda_rmsd() -> np.ndarray:
    """MDAnalysis's RMSD of the CA atoms over frames 3:90:4 (reference: frame 0)."""
    u = mda.Universe(PSF, DCD)
    return rms.RMSD(u, select=SELECT).run(**FRAMES).results.rmsd[:, 2]


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_an_unknown_option_is_one_error_naming_it(executor):
    with pytest.raises(ConfigError, match="unknown option 'stpe'") as err:
        ts.run(ts.RMSD(select=SELECT), PSF, DCD, executor=executor, stpe=2)
    assert "step" in str(err.value)   # the options run does take are listed


def test_an_option_of_another_executor_is_refused_named():
    with pytest.raises(ConfigError, match="'scheduler'"):
        ts.run(ts.RMSD(select=SELECT), PSF, DCD, executor="processes", n_workers=2, scheduler="tcp://x:1")


def test_executor_options_with_an_executor_instance_are_refused_not_ignored():
    from trajscale.executors.serial import SerialExecutor

    with pytest.raises(ConfigError, match="'scheduler'"):
        ts.run(ts.RMSD(select=SELECT), PSF, DCD, executor=SerialExecutor(), scheduler="tcp://x:1")


def test_options_are_checked_when_made():
    with pytest.raises(ConfigError, match="step"):
        RunOptions(step=0)
    with pytest.raises(ConfigError, match="max_block_bytes"):
        RunOptions(max_block_bytes=0)
    with pytest.raises(ConfigError, match="tasks"):
        RunOptions(n_tasks=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunOptions().step = 2   # type: ignore[misc]


def test_keywords_replace_the_fields_of_options():
    base = RunOptions(executor="dask", n_workers=3, start=5, executor_options={"scheduler": "tcp://a:1"})
    got = RunOptions.from_keywords(base, {"n_workers": 2, "retries": 0})
    assert (got.executor, got.n_workers, got.start) == ("dask", 2, 5)
    assert got.executor_options == {"scheduler": "tcp://a:1", "retries": 0}
    assert base.n_workers == 3 and base.executor_options == {"scheduler": "tcp://a:1"}   # unchanged
    with pytest.raises(ConfigError, match="RunOptions"):
        RunOptions.from_keywords({"n_workers": 2})   # a dict is not the record


def test_options_record_and_keywords_give_the_same_bits(mda_rmsd):
    """The same run asked with keywords and with a RunOptions: identical results and the same plan,
    and both MDAnalysis's RMSD over those frames."""
    kw = dict(executor="processes", n_workers=2, n_tasks=3, **FRAMES)
    by_keywords = ts.run(ts.RMSD(select=SELECT), PSF, DCD, **kw)
    by_record = ts.run(ts.RMSD(select=SELECT), PSF, DCD, options=RunOptions(**kw))
    np.testing.assert_array_equal(by_record.rmsd, by_keywords.rmsd)
    np.testing.assert_array_equal(by_record.frames, by_keywords.frames)
    np.testing.assert_array_equal(by_record.frames, np.arange(3, 90, 4))
    np.testing.assert_allclose(by_record.rmsd, mda_rmsd, atol=1e-4)
    for r in (by_keywords, by_record):
        assert (r.report.executor, r.report.n_workers, r.report.meta.n_tasks, r.report.meta.step) == \
            ("processes", 2, 3, 4)


def test_facts_count_and_plan_the_frames():
    facts = JobFacts(start=3, stop=90, step=4, n_atoms=214, frame_bytes=214 * 12)
    assert facts.n_frames == len(range(3, 90, 4))
    ranges = facts.plan(3, 2, 2**30)
    kept = [f for r in ranges for f in range(r.start, r.stop, 4)]
    assert kept == list(range(3, 90, 4)) and len(ranges) == 3


def test_the_code_that_runs_a_job_takes_records_not_long_argument_lists():
    """No function of the run engine, its records, the executors or their registry takes more than 8
    parameters or runs past 60 lines: options travel as RunOptions/JobFacts, and a run is a few named phases."""
    import ast
    from pathlib import Path

    pkg = Path(ts.__file__).parent
    bad = []
    executors = sorted(str(f.relative_to(pkg)) for f in (pkg / "executors").glob("*.py"))
    for name in ("engine.py", "run.py", "follow.py", "runspec.py", "planning.py", "report/runfacts.py",
                 "executor_registry.py", *executors):
        for node in ast.walk(ast.parse((pkg / name).read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                params = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                          if p is not None and p.arg not in ("self", "cls")]
                lines = node.end_lineno - node.lineno + 1
                if len(params) > 8 or lines > 60:
                    bad.append(f"{name}:{node.lineno} {node.name}: {len(params)} parameters, {lines} lines")
    assert not bad, "\n".join(bad)
