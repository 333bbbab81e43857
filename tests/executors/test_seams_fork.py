"""What a forked worker cannot use is seen before a pool forks: an open HDF5 file (the child would share
its descriptor and HDF5's state of it).  A URL client's runtime is the other (tests/remote/test_seams_auto.py).

Checked in a process of its own: the suite's worker processes may hold files other tests left open (xarray
keeps the files it opened in a cache of its own), which would say "an open HDF5 file" before this test opens one."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
import h5py
from trajscale.pools import holds_unforkable

path = sys.argv[1]
h5py.File(path, "w").close()
before = holds_unforkable()
with h5py.File(path, "r"):
    during = holds_unforkable()
print(repr((before, during, holds_unforkable())))
"""


@pytest.mark.cli
def test_an_open_hdf5_file_is_not_forked_with(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "x.h5")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == repr((None, "an open HDF5 file", None))
