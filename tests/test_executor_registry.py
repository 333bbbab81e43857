"""Executor names are written in one registry, and everything that names executors derives from it (no module
else compares with one or lists two: tests/test_guards.py)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

import trajscale as ts
from trajscale.errors import ConfigError
from trajscale.executor_registry import EXECUTORS, executor_traits, names

PKG = Path(ts.__file__).parent


def test_an_unknown_name_gets_one_error_listing_the_registered_ones():
    from trajscale.convert.pool import run_tasks
    from trajscale.executors import make_executor

    for call in (lambda: make_executor("gpu"), lambda: executor_traits("gpu")):
        with pytest.raises(ConfigError) as err:
            call()
        assert str(err.value) == f"unknown executor 'gpu'; choose one of {', '.join(EXECUTORS)}"
    with pytest.raises(ConfigError, match="unknown executor 'gpu'; choose one of auto, serial, processes"):
        run_tasks(print, [], "gpu", 1)
    with pytest.raises(ConfigError, match=r"--executor must be one of serial, processes, dask, mpi, got 'threads'"):
        run_tasks(print, [], "threads", 1)   # it runs analyses, not convert's segment writers


def test_the_cli_choices_derive_from_the_registry():
    from trajscale.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and "run" in a.choices).choices

    def choices(command: str, dest: str):
        """The choices of ``dest`` in ``command``'s parser, or in its first sub-command's (``run rmsd``)."""
        parser = sub[command]
        while True:
            found = [a for a in parser._actions if a.dest == dest]
            if found:
                return list(found[0].choices)
            parser = next(iter(next(a for a in parser._actions if isinstance(a.choices, dict)).choices.values()))

    assert choices("run", "executor") == ["auto", *names()]
    assert choices("pack", "executor") == ["auto", *names(workers=("one", "n_workers"), converts=True)]
    assert choices("convert", "executor") == ["auto", *(n for n, t in EXECUTORS.items() if t.convert_runner)]
    assert choices("rechunk", "executor") == choices("convert", "executor")
    assert choices("demo", "executor") == [n for n in names() if EXECUTORS[n].workers != "launcher"]
    assert choices("report", "predict_as") == [n for n, t in EXECUTORS.items() if t.predicted]
    assert "threads" in choices("run", "executor") and "threads" not in choices("report", "predict_as")


def test_the_prediction_reads_traits_not_names(monkeypatch):
    """An executor registered under another name with Dask's traits is predicted as Dask is; the bytes
    moved follow the documented formulas (docs/scaling.md) by trait."""
    from trajscale.report.fit import Model
    from trajscale.report.predict import bytes_moved, started_workers

    monkeypatch.setitem(EXECUTORS, "copy", dataclasses.replace(EXECUTORS["dask"], name="copy"))
    fields = {f.name: 0 for f in dataclasses.fields(Model)}
    model = Model(**{**fields, "executor": "serial", "target": "copy", "frames": 1000, "bytes": 10**9,
                     "job_bytes": 1000, "partial_bytes": 64, "partial_per_frame": False, "n_tasks": 16,
                     "max_tasks": 10**6, "tasks_fixed": True, "fitted_from": (1,), "notes": (),
                     "compute_spread": (1.0, 1.0), "read_spread": (1.0, 1.0), "straggler": "",
                     "slow_read": 1.0, "slow_compute": 1.0, "launch_s": None})
    n, t, j, p = 8, 16, 1000, 64
    assert bytes_moved(model, n, t) == min(n, t) * j + t * p                        # Dask: N J + T p
    assert bytes_moved(dataclasses.replace(model, target="dask"), n, t) == bytes_moved(model, n, t)
    assert bytes_moved(dataclasses.replace(model, target="processes"), n, t) == t * (j + p)   # T (J + p)
    mpi = dataclasses.replace(model, target="mpi")
    assert bytes_moved(mpi, n, t) == math.ceil(math.log2(n)) * j + n * p           # ceil(log2 N) J + N p
    assert bytes_moved(dataclasses.replace(mpi, partial_per_frame=True), n, t) == math.ceil(math.log2(n)) * j + p
    assert started_workers(dataclasses.replace(model, target="processes", tasks_fixed=True, n_tasks=3), 8) == 3
    assert started_workers(model, 8) == 8
    with pytest.raises(ConfigError, match="the prediction models the executors processes, dask, mpi, copy, "
                                          "not 'threads'"):
        bytes_moved(dataclasses.replace(model, target="threads"), n, t)


def test_names_select_by_trait():
    assert names(workers=("launcher",)) == ["mpi"]
    assert names(workers=("one",)) == ["serial"]
    assert set(names(predicted=True)) == {"processes", "dask", "mpi"}
