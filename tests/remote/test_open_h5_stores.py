"""``open_h5`` opens an HDF5 file from a location or from the ByteStore a caller holds: a store with a local path
by name, an object's bytes through a file object over its store. The reference is h5py's own read of the local
file; the object is served by moto."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from trajscale.errors import InputFileError
from trajscale.hdf5.hdf5 import open_h5
from trajscale.storage.bytestore import LocalFile
from trajscale.storage.location import Location

from .conftest import BUCKET

pytestmark = pytest.mark.remote


@pytest.fixture(scope="module")
def small(s3_server, tmp_path_factory):
    """(path, s3:// URL, its data): a small chunked dataset, uploaded."""
    path = tmp_path_factory.mktemp("open-h5") / "small.h5"
    data = np.arange(6000, dtype=np.float32).reshape(20, 100, 3)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(4, 100, 3))
    client = s3_server.client()
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    client.upload_file(str(path), BUCKET, "open-h5/small.h5")
    with h5py.File(path, "r") as f:
        expect = f["x"][()]
    return str(path), f"s3://{BUCKET}/open-h5/small.h5", expect


def test_a_local_store_is_opened_by_name(small):
    path, _, expect = small
    store = LocalFile(path)
    with open_h5(store) as f:
        assert f.filename == path   # HDF5's own driver on the file, not a file object
        np.testing.assert_array_equal(f["x"][()], expect)
    with open_h5(path) as f:
        assert f.filename == path
        np.testing.assert_array_equal(f["x"][2:9, 17:80], expect[2:9, 17:80])


def test_an_objects_store_and_its_url_read_the_files_bytes(small, s3_env):
    path, url, expect = small
    for given in (url, Location(url).store()):
        with open_h5(given) as f:
            assert f.filename != path
            np.testing.assert_array_equal(f["x"][()], expect)
            np.testing.assert_array_equal(f["x"][5:13, ::7], expect[5:13, ::7])


def test_a_local_path_that_is_no_file_is_one_line(tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        open_h5(tmp_path / "missing.h5")
    with pytest.raises(InputFileError, match="is a directory"):
        open_h5(tmp_path)
    (tmp_path / "empty.h5").write_bytes(b"")
    with pytest.raises(InputFileError, match="file is empty"):
        open_h5(tmp_path / "empty.h5")
    (tmp_path / "text.h5").write_text("not HDF5\n")
    with pytest.raises(InputFileError, match="not an HDF5 file"):
        open_h5(LocalFile(str(tmp_path / "text.h5")))
