"""``--executor auto`` for convert and rechunk: serial unless the work outweighs starting a pool, as for run."""

from __future__ import annotations

import logging
import os

import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import run_cli_here
from tests.convert.test_parallel_convert import assert_reads_like
from tests.h5md.test_rechunk import assert_same_tree
from trajscale.convert.options import WriteOptions
from trajscale.executors import choose_executor


@pytest.mark.slow(seconds=4)   # three whole commands
def test_convert_auto_chooses_serial_for_a_small_job_and_says_why(tmp_path):
    """AdK in water, 10 XTC frames: far below a pool's start; the output is the serial one, as MDAnalysis reads."""
    serial, auto = tmp_path / "serial.h5md", tmp_path / "auto.h5md"
    assert run_cli_here("convert", D.GRO, D.XTC, "-o", str(serial), "-q").returncode == 0
    proc = run_cli_here("convert", D.GRO, D.XTC, "-o", str(auto), "--executor", "auto", "-v")
    assert proc.returncode == 0, proc.stderr
    assert "executor serial: estimated work" in proc.stderr, proc.stderr
    assert_same_tree(serial, auto)
    assert_reads_like(D.GRO, auto, D.XTC)
    again = tmp_path / "again.h5md"
    proc = run_cli_here("rechunk", str(auto), "-o", str(again), "--chunks", "2", "--executor", "auto", "-v")
    assert proc.returncode == 0, proc.stderr
    assert "executor serial:" in proc.stderr
    assert_reads_like(D.GRO, again, D.XTC)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: auto never starts a pool")
def test_auto_picks_a_pool_for_large_work_with_run_s_rule(caplog):
    """The choice is ``trajscale run``'s: its ``choose_executor`` on the conversion's frames and atoms."""
    caplog.set_level(logging.INFO)
    big = WriteOptions(executor="auto").chosen(100_000, 200_000, 0.01)
    assert big.executor == choose_executor(_Size(100_000, 200_000, 0.01))[0] == "processes"
    small = WriteOptions(executor="auto", n_workers=2).chosen(10, 100)
    assert small.executor == "serial" and small.n_workers == 2
    assert WriteOptions(executor="dask").chosen(10, 100).executor == "dask"   # a named executor stays


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: auto never starts a pool")
def test_auto_weighs_a_url_input_as_run_does():
    """Reading-bound work from a URL (its Source reads ahead) is not shared by workers: serial, as ``trajscale
    run``'s rule says for the same size; the same work from a local file gets a pool."""
    size = dict(n_frames=3_000, n_atoms=200_000)   # ~2.4 s of reading, ~2.4 s of compute
    remote = _Size(size["n_frames"], size["n_atoms"], 0.0)
    remote.reads_ahead = True
    assert choose_executor(remote, 2)[0] == "serial"
    assert WriteOptions(executor="auto", n_workers=2).chosen(**size, reads_ahead=True).executor == "serial"
    assert WriteOptions(executor="auto", n_workers=2).chosen(**size).executor == "processes"


def test_auto_with_virtual_is_refused_in_one_line(tmp_path):
    proc = run_cli_here("convert", D.GRO, D.XTC, "-o", str(tmp_path / "v.h5md"), "--executor", "auto", "--virtual")
    assert proc.returncode != 0 and "--virtual keeps per-worker segments" in proc.stderr
    assert "Traceback" not in proc.stderr and not list(tmp_path.iterdir())


class _Size:
    def __init__(self, n_frames: int, n_atoms: int, decode: float) -> None:
        self.n_frames, self.n_atoms, self.span_atoms, self.decode_s_per_frame = n_frames, n_atoms, None, decode
        self.cost, self.reads_ahead = None, False
