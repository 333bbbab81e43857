"""A writer killed while HDF5 flushes leaves a file HDF5 opens, and ``trajscale repair`` mends one that
another writer left shorter than its superblock records (HDF5: "truncated file")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from MDAnalysis.coordinates.H5MD import H5MDReader

from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.cli

GDB = shutil.which("gdb")
HERE = Path(__file__).parent

#: Frames of unknown number, 100 a commit: the datasets grow ahead of them (allocated when grown), by
#: 249 frames (2 MiB) at first, then doubling. Frame i holds the value i.
WRITER = """
import sys
import numpy as np
from trajscale.h5md.writer import H5MDWriter

def write(path, n, driver=None):
    comm = None
    if driver == "mpio":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    with H5MDWriter(path, 700, driver=driver, comm=comm) as w:
        for i in range(0, n, 100):
            f = np.arange(i, i + 100)
            w.write(position=np.broadcast_to(f[:, None, None], (100, 700, 3)).astype(np.float32), step=f,
                    time=0.5 * f)

if __name__ == "__main__":
    write(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])
"""


def write(path: Path, n: int) -> None:
    """:data:`WRITER`, in this process."""
    code: dict = {}
    exec(WRITER, code)
    code["write"](str(path), n)


def frames_of(path: Path) -> np.ndarray:
    """The positions MDAnalysis reads from ``path``, one value per frame (each frame is one value)."""
    r = H5MDReader(str(path))
    try:
        return np.array([np.unique(ts.positions)[0] for ts in r])
    finally:
        r.close()


@pytest.mark.slow   # (a writer under gdb: the full suite's)
@pytest.mark.skipif(GDB is None, reason="needs gdb")
@pytest.mark.parametrize("driver", [None, pytest.param("mpio", marks=pytest.mark.mpi)])
def test_a_writer_killed_at_any_flush_leaves_a_file_hdf5_opens(tmp_path, driver):
    """Under ``mpio`` the grown datasets' space lay past the end of the file at two of these moments."""
    if driver == "mpio" and not h5py.get_config().mpi:
        pytest.skip("h5py without MPI")
    out, shots = tmp_path / "w.h5md", tmp_path / "shots"
    shots.mkdir()
    env = dict(os.environ, SNAPSHOT_OF=str(out), SNAPSHOT_DIR=str(shots), PYTHONPATH=str(ROOT / "src"),
               OMP_NUM_THREADS="1")
    writer = [sys.executable, "-c", WRITER, str(out), "1000", *([driver] if driver else [])]
    got = subprocess.run([GDB, "-nx", "-batch", "-ex", "set debuginfod enabled off", "-x",
                          str(HERE / "flush_snapshots.py"), "--args", *writer],
                         capture_output=True, text=True, env=env, timeout=300)
    assert "exited normally" in got.stdout, got.stdout[-3000:] + got.stderr[-3000:]
    taken = sorted(shots.iterdir())
    assert len(taken) > 10, got.stdout[-2000:]   # two flushes a commit; the datasets grew twice
    cut = []
    # Each is the file a SIGKILL at that moment leaves: HDF5 itself opens it. The first is left out: HDF5's
    # first flush, before any frame is counted, still writes the superblock as the file's creation made it
    # (HDF5 writes it again after H5FD_truncate): a writer killed there has no frame to keep.
    for shot in taken[1:]:
        try:
            with h5py.File(shot, "r") as f:
                n = f["particles/all/position/step"].shape[0]
                np.testing.assert_array_equal(f["particles/all/position/value"][:n, 0, 0], np.arange(n))
        except OSError as exc:
            cut.append(f"{shot.name}: {exc}")
    assert cut == [], cut
    np.testing.assert_array_equal(frames_of(out), np.arange(1000))


def a_file_cut_short(tmp_path: Path) -> tuple[Path, int]:
    """A file as a writer killed in that window leaves it: 200 frames, the datasets grown by 1,800 rows
    (their chunks allocated at the end of the file, never written), the superblock recording the grown
    size, the file not extended to it."""
    path = tmp_path / "cut.h5md"
    write(path, 200)
    with h5py.File(path, "r+") as f:   # rows reserved ahead, as the writer grows them
        f["particles/all/position/value"].resize(2000, axis=0)
    data = path.read_bytes()
    end = len(data.rstrip(b"\0"))   # the reserved rows were never written: zeros to the end
    assert end < len(data) - 1000 * 700 * 12
    os.truncate(path, end)
    with pytest.raises(OSError, match="truncated file"):
        h5py.File(path, "r")
    return path, len(data) - end


def test_repair_extends_a_file_cut_short_and_keeps_its_frames(tmp_path):
    path, missing = a_file_cut_short(tmp_path)
    said = run_cli("inspect", str(path))
    assert said.returncode != 0 and "Traceback" not in said.stderr, said.stderr
    assert "truncated: it has" in said.stderr and "trajscale repair" in said.stderr, said.stderr
    got = run_cli("repair", str(path))
    assert got.returncode == 0, got.stderr
    assert f"extended by {missing} bytes" in got.stdout and "kept 200 complete frames" in got.stdout, got.stdout
    np.testing.assert_array_equal(frames_of(path), np.arange(200))


def test_repair_leaves_a_file_cut_short_in_its_metadata_as_it_was(tmp_path):
    """A copy cut short inside its metadata: extended, it is no HDF5 file either, so it is left as it was."""
    path = tmp_path / "w.h5md"
    write(path, 200)
    cut = path.read_bytes()[:1024]   # the superblock, and the first of the objects after it
    path.write_bytes(cut)
    got = run_cli("repair", str(path))
    assert got.returncode != 0 and "Traceback" not in got.stderr and str(path) in got.stderr, got.stderr
    assert path.read_bytes() == cut
