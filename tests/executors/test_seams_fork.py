"""What a forked worker cannot use is seen before a pool forks: an open HDF5 file (the child would share
its descriptor and HDF5's state of it).  A URL client's runtime is the other (tests/remote/test_seams_auto.py)."""

from __future__ import annotations

import h5py

from trajscale.pools import holds_unforkable


def test_an_open_hdf5_file_is_not_forked_with(tmp_path):
    path = tmp_path / "x.h5"
    h5py.File(path, "w").close()
    assert holds_unforkable() in (None, "a URL client's runtime")   # (another test's requests, in this process)
    with h5py.File(path, "r"):
        assert holds_unforkable() == "an open HDF5 file"
    assert holds_unforkable() != "an open HDF5 file"
