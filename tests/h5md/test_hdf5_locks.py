"""An HDF5 file whose lock cannot be had is named as such, with what to do, not as a truncated file."""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import pytest

from trajscale.errors import InputFileError
from trajscale.hdf5.hdf5 import lock_problem, open_h5

HOLD = """import sys, time, h5py
f = h5py.File(sys.argv[1], "a")
print("holding", flush=True)
time.sleep(120)
"""


@pytest.mark.cli
def test_a_file_another_process_writes_is_named_as_locked(tmp_path, monkeypatch):
    # the holder locks only without it (HDF5 reads it at a process's first open)
    monkeypatch.delenv("HDF5_USE_FILE_LOCKING", raising=False)
    path = tmp_path / "held.h5"
    with h5py.File(path, "w") as f:
        f["x"] = 1
    env = {k: v for k, v in os.environ.items() if k != "HDF5_USE_FILE_LOCKING"}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(OSError, match="unable to lock file"):   # HDF5's own words: a lock, not damage
            h5py.File(path, "r")
        with pytest.raises(InputFileError) as err:
            open_h5(path)
        msg = str(err.value)
        assert "another process holds HDF5's lock" in msg and "truncated" not in msg, msg
        with h5py.File(path, "r", locking=False) as f:   # the file itself is whole
            assert f["x"][()] == 1
    finally:
        holder.kill()
        holder.wait()


def test_a_file_system_without_locks_names_the_environment_variable():
    # h5py's OSError on NFS without lockd (errno 37, ENOLCK), in its own words
    exc = OSError(37, "Unable to synchronously open file (unable to lock file, errno = 37, error message = "
                      "'No locks available')")
    msg = lock_problem(exc)
    assert "HDF5_USE_FILE_LOCKING=FALSE" in msg and "No locks available" in msg
    assert lock_problem(OSError(2, "Unable to open file (file signature not found)")) is None


def test_a_file_followed_in_this_process_opens_again_for_a_whole_read(tmp_path):
    """HDF5 shares one open file per process: a finished read of a file a follower has open (without the
    lock), and a follower of a file open for a finished read, get the same frames, not "locking flag values
    don't match"."""
    import MDAnalysis as mda
    import numpy as np
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.h5md.follow import GrowingH5MDSource
    from trajscale.sources import open_source

    path = tmp_path / "adk.h5md"
    u = mda.Universe(PSF, DCD)
    with mda.Writer(str(path), n_atoms=u.atoms.n_atoms) as w:   # MDAnalysis's own H5MD writer
        for _ in u.trajectory[:4]:
            w.write(u.atoms)
    ref = np.stack([ts.positions for ts in u.trajectory[:4]])
    for first, second in ((GrowingH5MDSource, open_source), (open_source, GrowingH5MDSource)):
        a = first(str(path))
        try:
            b = second(str(path))
            assert np.array_equal(b.read(0, 4).positions, ref)
            b.close()
            assert np.array_equal(a.read(0, 4).positions, ref)
        finally:
            a.close()
