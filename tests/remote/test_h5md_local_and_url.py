"""One H5MD file read from its path and from its URL: the same blocks for every layout, through one chunk reader.

The reference is independent of trajscale's reader: h5py's own read of the dataset (times the unit's factor),
and for delta-coded layouts MDAnalysis's frames of the trajectory converted, within the precision.
"""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests.datafiles import DCD, PSF

from .conftest import BUCKET

pytestmark = pytest.mark.remote

#: name -> (chunks, compression, precision and encoding of delta-coded positions)
LAYOUTS = {
    "contiguous": ("contiguous", "none", None),
    "frame": ("frame", "none", None),
    "chunked": ("7", "none", None),
    "split": ("h5py", "none", None),   # h5py's own guess: chunks that split frames (and xyz)
    "gzip": ("4", "gzip:1", None),
    "deltas-blosc": ("7", "blosc-lz4", "deltas"),
    "deltas-gzip": ("5", "gzip:1", "deltas32"),
}
PRECISION = 0.01
POSITION = "particles/all/position/value"
#: (start, stop, stride, atoms): whole frames, a CA-like spread, two runs far apart, strided, one frame
READS = [(0, 98, 1, None), (0, 98, 1, np.arange(4, 3341, 15)),
         (3, 60, 1, np.r_[np.arange(10, 400, 15), np.arange(2500, 2600)]),
         (2, 97, 3, np.array([3000, 2, 17, 17, 900])), (97, 98, 1, None)]


@pytest.fixture(scope="module")
def stores(s3_server, tmp_path_factory):
    """``{layout: (path, s3:// URL)}``: AdK in vacuum converted in every layout, each uploaded."""
    from trajscale.convert.convert import convert
    from trajscale.h5md.layout import Layout

    root = tmp_path_factory.mktemp("h5md-local-and-url")
    client = s3_server.client()
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    out = {}
    for name, (chunks, compression, encoding) in LAYOUTS.items():
        path = root / f"{name}.h5md"
        extra = {"precision": PRECISION, "encoding": encoding} if encoding else {}
        convert(PSF, [DCD], str(path), layout=Layout.parse(chunks, compression), **extra)
        client.upload_file(str(path), BUCKET, f"layouts/{name}.h5md")
        out[name] = (str(path), f"s3://{BUCKET}/layouts/{name}.h5md")
    return out


@pytest.fixture(scope="module")
def mda_positions():
    u = mda.Universe(PSF, DCD)
    return np.array([ts.positions.copy() for ts in u.trajectory])


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_local_and_a_url_read_give_the_same_blocks(s3_env, stores, mda_positions, layout):
    import h5py

    from trajscale.sources import H5MDSource

    path, url = stores[layout]
    with h5py.File(path, "r") as f:
        stored = f[POSITION][()]
    with H5MDSource(path) as local, H5MDSource(url) as remote:
        assert local.store.c_openable_path == path and remote.store.c_openable_path is None
        assert set(local._reads) == set(remote._reads) == {"position"}   # both read by the chunk reader
        scale = np.float32(local.info.scales["position"])
        for start, stop, stride, atoms in READS:
            a = local.read(start, stop, atoms, stride=stride)
            b = remote.read(start, stop, atoms, stride=stride)
            for x, y in ((a.positions, b.positions), (a.box, b.box), (a.time, b.time), (a.step, b.step)):
                np.testing.assert_array_equal(x, y)
            frames = mda_positions[start:stop:stride]
            if atoms is not None:
                frames = frames[:, atoms]
            if layout.startswith("deltas"):
                np.testing.assert_allclose(a.positions, frames, rtol=0, atol=PRECISION / 2 * 1.02)
            else:
                want = stored[start:stop:stride] if atoms is None else stored[start:stop:stride][:, atoms]
                np.testing.assert_array_equal(a.positions, want * scale)
        assert remote.remote_stats()["requests"] > 0 and local.remote_stats() is None
