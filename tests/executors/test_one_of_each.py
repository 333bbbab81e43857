"""One implementation of each parallel mechanism, behind the executor registry.

* Process pools are made in one module of ``src/`` (:mod:`trajscale.pools`), Dask clusters and
  clients in one (:mod:`trajscale.clusters`): tests/test_guards.py checks it on the source.
* Adding an executor takes its module, one registry entry and a conformance subclass: a test-only
  executor registered here runs ``trajscale run``, ``convert`` and ``pack`` (in this process), its
  own option on each command line, and gives serial's results.
* ``auto`` is in the registry; each executor's options are declared there and the CLI derives them.
"""

from __future__ import annotations

import csv
import signal
from pathlib import Path

import h5py
import numpy as np
import pytest

import trajscale as ts
from trajscale.errors import ConfigError
from trajscale.executor_registry import EXECUTORS, executor_traits, home_names, names
from trajscale.testing import ExecutorConformance

from . import toy_executor
from .toy_executor import TRAITS, ToyExecutor

PKG = Path(ts.__file__).resolve().parent


def test_a_forkserver_pools_workers_see_the_environment_as_it_is_now(monkeypatch):
    """A forkserver is started once per process and forks every later pool's workers: a variable set after it
    started (credentials, an endpoint) still reaches the next pool's workers, as a spawned worker's would."""
    import os

    from trajscale.pools import process_pool, quiet_worker

    def pool_sees(name):
        with process_pool(1, start_method="forkserver", initializer=quiet_worker) as (pool, _):
            try:
                return pool.submit(os.getenv, name).result(timeout=120)
            finally:
                pool.shutdown()

    monkeypatch.delenv("TRAJSCALE_TEST_LATE_VARIABLE", raising=False)
    assert pool_sees("TRAJSCALE_TEST_LATE_VARIABLE") is None   # (the forkserver runs from here on)
    monkeypatch.setenv("TRAJSCALE_TEST_LATE_VARIABLE", "set after the forkserver started")
    assert pool_sees("TRAJSCALE_TEST_LATE_VARIABLE") == "set after the forkserver started"


def test_auto_is_in_the_registry_and_picks_registered_executors():
    auto = executor_traits("auto")
    assert auto.chooses and set(auto.picks) <= set(EXECUTORS) and not any(EXECUTORS[p].chooses for p in auto.picks)
    assert "auto" not in names() and names(choosers=True)[0] == "auto"
    assert home_names()[0] == "auto" and "mpi" not in home_names()
    from trajscale.executors import make_executor

    with pytest.raises(ConfigError, match="executor 'auto' is chosen by trajscale.run"):
        make_executor("auto")


def test_each_executors_options_are_declared_with_it_and_the_cli_derives_them():
    from trajscale.cli.main import build_parser
    from trajscale.executors import option_names

    for name, traits in EXECUTORS.items():
        if traits.chooses:
            continue
        assert {o.name for o in traits.options} <= set(option_names(name)), name   # its class takes each
    run = build_parser("run")
    sub = next(a for a in run._actions if isinstance(a.choices, dict)).choices["run"]
    rmsd = next(a for a in sub._actions if isinstance(a.choices, dict)).choices["rmsd"]
    flags = {s for a in rmsd._actions for s in a.option_strings}
    declared = {o.flag for t in EXECUTORS.values() for o in t.options}
    assert declared <= flags
    assert {"--scheduler", "--scheduler-timeout", "--dask-cluster", "--dask-jobs", "--start-method"} <= declared


@pytest.fixture
def toy(monkeypatch):
    """The toy executor, registered for this test (one entry: the CLI built after it offers it).  The
    CLI's ``main`` runs in this process: its signal handlers are put back after the test."""
    monkeypatch.setitem(EXECUTORS, TRAITS.name, TRAITS)
    toy_executor.CALLS.clear()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield toy_executor.CALLS
    for s, h in handlers.items():
        signal.signal(s, h)


def _rows(path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def test_a_registered_executor_runs_run_convert_and_pack(toy, tmp_path, adk_vacuum, monkeypatch):
    """Its module and one registry entry: the commands offer it, with its option, and it gives serial's results."""
    from tests.ml.conftest import write_npz_set
    from trajscale.cli.main import main

    monkeypatch.chdir(tmp_path)
    top, traj = adk_vacuum
    assert main(["convert", top, traj, "-o", "serial.h5md", "--no-progress"]) == 0
    assert main(["convert", top, traj, "-o", "toy.h5md", "--executor", "toy", "-n", "2", "--toy-label", "conv",
                 "--no-progress"]) == 0
    with h5py.File("serial.h5md") as a, h5py.File("toy.h5md") as b:
        pos = "particles/all/position/value"
        np.testing.assert_array_equal(a[pos][()], b[pos][()])
    assert toy[-1] == ("tasks", "conv")

    common = ["run", "rmsd", top, "serial.h5md", "--select", "name CA", "--tasks", "5", "--no-progress"]
    assert main([*common, "--executor", "serial", "--out", "serial.csv"]) == 0
    assert main([*common, "--executor", "toy", "--toy-label", "hello", "--out", "toy.csv"]) == 0
    assert _rows("toy.csv") == _rows("serial.csv")
    assert ("run", "hello") in toy

    samples, originals = write_npz_set(tmp_path, n_files=5)
    assert main(["pack", *samples, "-o", "toy.h5", "--executor", "toy", "--toy-label", "packed", "--no-progress"]) == 0
    assert toy[-1] == ("tasks", "packed")
    with h5py.File("toy.h5") as f:   # against the inputs as NumPy reads them
        np.testing.assert_array_equal(f["x"][()], np.concatenate([o["x"] for o in originals]))
        np.testing.assert_array_equal(f["y"][()], np.concatenate([o["y"] for o in originals]))


def test_an_option_of_another_executor_is_refused_in_one_line(toy, tmp_path, adk_vacuum, capsys):
    from trajscale.cli.main import main

    top, traj = adk_vacuum
    code = main(["run", "rmsd", top, traj, "--executor", "serial", "--toy-label", "x", "--out",
                 str(tmp_path / "a.csv")])
    err = capsys.readouterr().err.strip().splitlines()
    want = "trajscale run: error: --toy-label: for --executor toy; this run's executor is serial"
    assert code != 0 and err == [want], err


def test_pack_refuses_an_executor_whose_results_do_not_come_home(tmp_path):
    from tests.ml.conftest import write_npz_set
    from trajscale.ml.pack import pack

    samples, _ = write_npz_set(tmp_path, n_files=2)
    with pytest.raises(ConfigError, match="pack reads on the executors auto, serial, processes, dask"):
        pack(samples, tmp_path / "a.h5", executor="threads")


def test_pack_auto_equals_serial(tmp_path):
    from tests.ml.conftest import write_npz_set
    from trajscale.ml.pack import pack

    samples, originals = write_npz_set(tmp_path, n_files=6)
    pack(samples, tmp_path / "auto.h5", executor="auto", n_workers=2)
    with h5py.File(tmp_path / "auto.h5") as f:
        np.testing.assert_array_equal(f["x"][()], np.concatenate([o["x"] for o in originals]))


class TestToy(ExecutorConformance):
    """The conformance suite, as every executor passes it."""

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def registered(cls):
        EXECUTORS[TRAITS.name] = TRAITS
        yield
        EXECUTORS.pop(TRAITS.name, None)

    @classmethod
    def new_executor(cls):
        return ToyExecutor(2)
