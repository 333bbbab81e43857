"""A pool worker's large results come home through a file in shared memory (executors/homeward.py): the
same arrays, bit for bit, dtype, shape, order and alignment, the file removed once read; small results,
and a worker without the folder, use the pool's pipe; and an ensemble run on processes whose results come
that way has serial's bits."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass

import numpy as np
import pytest

from trajscale.executors import homeward
from trajscale.executors.homeward import ALIGN, Spilled, received, results_folder, spill

pytestmark = pytest.mark.skipif(not os.path.isdir(homeward.SHARED_MEMORY), reason="no /dev/shm here")


@dataclass(frozen=True)
class Part:
    rows: np.ndarray
    label: str


def _results() -> list:
    """What a task's results may hold: arrays of every layout, dtypes whose sizes leave odd offsets, and a
    view, a read-only array, an object array, an empty one, one array twice."""
    rng = np.random.default_rng(0)
    f64 = rng.normal(size=(30, 848))
    odd = np.arange(13, dtype=np.int8)
    fortran = np.asfortranarray(rng.normal(size=(7, 5)).astype(np.float32))
    ro = rng.normal(size=101)
    ro.setflags(write=False)
    return [(0, Part(f64, "a")), (1, {"odd": odd, "f32": fortran, "view": f64[:, ::3], "ro": ro,
                                      "objects": np.array(["x", 1], dtype=object), "empty": np.zeros((0, 4)),
                                      "again": f64, "int": 5})]


def _same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.flags.c_contiguous == b.flags.c_contiguous and a.flags.f_contiguous == b.flags.f_contiguous
        if a.dtype != object:
            assert a.tobytes(order="A") == b.tobytes(order="A")   # bit for bit
            assert b.flags.aligned and b.ctypes.data % b.dtype.alignment == 0
        else:
            assert a.tolist() == b.tolist()
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, Part):
        _same(a.rows, b.rows)
        assert a.label == b.label
    else:
        assert a == b


@pytest.fixture
def folder():
    path = results_folder()
    assert path is not None and path.startswith(homeward.SHARED_MEMORY)
    yield path
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)


def test_large_results_come_back_bit_for_bit_and_the_file_is_removed(folder):
    want = _results()
    sent = spill(want, folder, min_bytes=0)
    assert isinstance(sent, Spilled) and os.listdir(folder) == [os.path.basename(sent.path)]
    assert all(o % ALIGN == 0 for o in sent.offsets)   # (and the root's buffer starts on a multiple of ALIGN)
    assert os.path.getsize(sent.path) == sent.nbytes >= want[0][1].rows.nbytes
    got = received(sent)
    assert os.listdir(folder) == []
    assert got[0][1].rows.ctypes.data % ALIGN == 0 and got[1][1]["f32"].ctypes.data % ALIGN == 0
    _same(pickle.loads(pickle.dumps(want, protocol=4)), got)   # as the pool's pipe brings them (a view copied)
    # one array sent once, and home as one array; writable where the worker's was (a read-only one, such as
    # the feature labels every member of a topology shares, stays read-only, as a serial run has it)
    assert got[1][1]["again"] is got[0][1].rows
    assert got[0][1].rows.flags.writeable and not got[1][1]["ro"].flags.writeable


def test_small_results_and_no_folder_take_the_pipe(folder, tmp_path):
    want = _results()
    assert spill(want, folder) is want   # (about 200 kB of arrays: under MIN_SPILL_BYTES)
    assert spill(want, None, min_bytes=0) is want
    assert spill(want, str(tmp_path / "gone"), min_bytes=0) is want   # the pool closed its folder meanwhile
    assert received(want) is want
    assert os.listdir(folder) == []


@pytest.mark.fork
def test_an_ensemble_on_processes_brings_its_features_home_by_file_with_serial_bits(tmp_path, monkeypatch):
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    import trajscale as ts
    from tests.executors import fork_here
    from trajscale.executors import processes
    from trajscale.testing.mdcath import from_universe

    u = mda.Universe(PSF, DCD)
    for i in range(2):
        from_universe(str(tmp_path / f"mdcath_dataset_{i}abcA00.h5"), u, domain=f"{i}abcA00", select="resid 1-40",
                      members=[("320", "0"), ("348", "0"), ("379", "0")], n_frames=8, seed=i)
    glob = str(tmp_path / "mdcath_dataset_*.h5")
    analysis = ts.Ramachandran(select="protein", sincos=True)
    serial = ts.run(analysis, glob, executor="serial")
    # every task's results spilled, however small (the forked workers inherit the threshold)
    monkeypatch.setattr(homeward, "MIN_SPILL_BYTES", 0)
    came = []

    def counted(got):
        came.append(isinstance(got, Spilled))
        return received(got)

    def folder():
        made.append(results_folder())
        return made[-1]

    made: list = []
    monkeypatch.setattr(processes, "received", counted)
    monkeypatch.setattr(processes, "results_folder", folder)
    fork_here()   # (the workers inherit the threshold: forked, as "processes" starts them where it may)
    r = ts.run(analysis, glob, executor="processes", n_workers=2)
    assert len(made) == 1 and made[0] is not None and not os.path.exists(made[0])   # removed with the pool
    assert came and all(came)
    assert r.names == serial.names
    for a, b in zip(r.arrays(), serial.arrays(), strict=True):
        assert a.dtype == b.dtype == np.float64 and np.array_equal(a, b)


@pytest.mark.cli
def test_a_killed_parents_folder_is_removed_by_the_next_pool():
    """A parent killed mid-run (SIGKILL) cannot remove its pool's folder in shared memory: the next pool's
    start removes the folders of parents that are gone, and keeps a running parent's."""
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead = os.path.join(homeward.SHARED_MEMORY, f"{homeward.PREFIX}{int(gone.stdout)}-test")
    os.makedirs(dead)
    with open(os.path.join(dead, "in-flight"), "wb") as f:
        f.write(b"x" * 1000)
    mine = results_folder()
    try:
        assert mine is not None and os.path.basename(mine).startswith(f"{homeward.PREFIX}{os.getpid()}-")
        assert not os.path.exists(dead)
        again = results_folder()   # (this process is alive: its first folder stays)
        assert os.path.isdir(mine)
        os.rmdir(again)
    finally:
        os.rmdir(mine)
