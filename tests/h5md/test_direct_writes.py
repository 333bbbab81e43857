"""DirectWrites: rows written with pwrite at planned addresses read back through HDF5 as written.

Reference: h5py reading the file after the writes (and NumPy arrays of what was written).
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from trajscale.errors import OutputError
from trajscale.h5md import direct_write
from trajscale.h5md.direct_write import DirectWrites, plan_writes


def _early(**kw):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    return dict(kw, dcpl=dcpl)


@pytest.mark.parametrize("chunks", [None, (1, 50, 3), (7, 50, 3), (64, 50, 3)])
def test_rows_written_in_any_order_read_back_through_hdf5(tmp_path, chunks):
    """23 frames: chunks of 7 leave a partial edge chunk; 64 is one chunk larger than the dataset."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("pos", **_early(shape=(23, 50, 3), dtype=np.float32, chunks=chunks,
                                         maxshape=None if chunks is None else (None, 50, 3)))
        f.create_dataset("step", shape=(23,), dtype=np.int64, chunks=(4,), maxshape=(None,))
        f["step"][...] = 0   # chunks allocated by writing them, as H5MDWriter.preallocate does
    targets = plan_writes(path, ["pos", "step"])
    pos = np.random.default_rng(1).random((23, 50, 3)).astype(np.float32)
    with DirectWrites(path, targets) as dw:
        for a, b in ((9, 23), (0, 4), (4, 9)):
            dw.write("pos", a, pos[a:b])
            dw.write("step", a, np.arange(a, b) * 10)   # converted to the stored int64
        dw.sync()
    with h5py.File(path) as f:
        np.testing.assert_array_equal(f["pos"][()], pos)
        np.testing.assert_array_equal(f["step"][()], np.arange(23) * 10)


def test_only_unfiltered_allocated_whole_row_datasets_are_planned(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("gzip", shape=(4, 10, 3), dtype=np.float32, chunks=(2, 10, 3), compression="gzip")
        f.create_dataset("split", **_early(shape=(4, 10, 3), dtype=np.float32, chunks=(2, 5, 3)))
        f.create_dataset("late", shape=(4, 10, 3), dtype=np.float32, chunks=(2, 10, 3))
        f.create_dataset("big_endian", **_early(shape=(4, 10, 3), dtype=">f4"))
    for name, why in (("gzip", "filtered"), ("split", "split a row"), ("late", "not allocated"),
                      ("big_endian", "byte order")):
        with pytest.raises(OutputError, match=why):
            plan_writes(path, [name])


def test_addresses_that_hdf5_does_not_read_back_are_refused(tmp_path, monkeypatch):
    """The plan writes a row at its computed address and reads it through HDF5 before any worker writes."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("pos", **_early(shape=(6, 10, 3), dtype=np.float32, chunks=(2, 10, 3)))
    real = direct_write._addresses
    monkeypatch.setattr(direct_write, "_addresses", lambda ds: real(ds) + 12)   # one atom off
    with pytest.raises(OutputError, match="did not read back"):
        plan_writes(path, ["pos"])
    with h5py.File(path) as f:
        assert not f["pos"][()].any()   # the probe was undone


def test_rows_outside_the_dataset_or_of_another_size_are_refused(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("pos", **_early(shape=(4, 10, 3), dtype=np.float32))
    with DirectWrites(path, plan_writes(path, ["pos"])) as dw:
        with pytest.raises(ValueError, match="outside"):
            dw.write("pos", 3, np.zeros((2, 10, 3), np.float32))
        with pytest.raises(ValueError, match="bytes"):
            dw.write("pos", 0, np.zeros((1, 9, 3), np.float32))
