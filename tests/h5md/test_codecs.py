"""Codec names (issue 14): every name writes the filter it says, reads back bit-identical, and
inspect names it; unknown names and levels are one clear error."""

from __future__ import annotations

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from tests.conftest import run_cli_here
from trajscale.convert.rechunk import rechunk
from trajscale.errors import ConfigError
from trajscale.h5md.inspect import inspect_file
from trajscale.h5md.layout import Layout

hdf5plugin = pytest.importorskip("hdf5plugin")

#: name given -> (name inspect reports, HDF5 filter ids in the pipeline)
CODECS = {
    "gzip:2": ("gzip:2", {"shuffle", "gzip"}),
    "lzf": ("lzf", {"shuffle", "lzf"}),
    "zstd": ("zstd:3", {"shuffle", "32015"}),
    "zstd:9": ("zstd:9", {"shuffle", "32015"}),
    "lz4": ("lz4", {"shuffle", "32004"}),
    "blosc-zstd": ("blosc-zstd:5", {"32001"}),
    "blosc-zstd:2": ("blosc-zstd:2", {"32001"}),
    "blosc-lz4": ("blosc-lz4:5", {"32001"}),
    "blosc": ("blosc-lz4:5", {"32001"}),          # the old name, kept
}


@pytest.fixture(scope="module")
def dcd(adk_vacuum):
    """The PSF's topology and the DCD's coordinates, as MDAnalysis reads them (once for every codec)."""
    u = mda.Universe(*adk_vacuum)
    return u._topology, u.trajectory.timeseries(order="fac")


@pytest.mark.parametrize("spec", CODECS)
def test_codec_round_trips_and_is_named(tmp_path, dcd, adk_vacuum_h5md, spec):
    out = tmp_path / "c.h5md"
    # one-frame chunks: MDAnalysis's reader reads a frame at a time and would decompress a chunk of many
    # frames once for each of them (the codec's pipeline is the same whatever the chunk's shape)
    rechunk(adk_vacuum_h5md, out, Layout.parse("frame", spec))
    named, filters = CODECS[spec]
    with h5py.File(out) as f:
        assert set(f["particles/all/position/value"]._filters) == filters
    assert inspect_file(out)["compression"] == named
    # MDAnalysis (with the filters registered) reads exactly the DCD's coordinates
    topology, ref = dcd
    got = mda.Universe(topology, str(out)).trajectory.timeseries(order="fac")
    np.testing.assert_array_equal(got, ref)


def test_blosc_zstd_is_smaller_than_blosc_lz4(tmp_path, adk_vacuum_h5md):
    sizes = {}
    for spec in ("blosc-zstd", "blosc-lz4", "none"):
        rechunk(adk_vacuum_h5md, tmp_path / f"{spec}.h5md", Layout.parse("auto", spec))
        sizes[spec] = (tmp_path / f"{spec}.h5md").stat().st_size
    assert sizes["blosc-zstd"] < sizes["blosc-lz4"] < sizes["none"]


@pytest.mark.parametrize("bad, says", [("snappy", "unknown compression 'snappy'"),
                                       ("gzip:12", "gzip level must be 1-9"),
                                       ("lz4:3", "lz4 takes no level"), ("blosc-zstd:x", "level must be 0-9"),
                                       ("zstd:0", "zstd level must be 1-22")])
def test_bad_codec_is_one_clear_error(bad, says):
    with pytest.raises(ConfigError, match=says):
        Layout.parse("auto", bad)


def test_cli_unknown_codec_lists_the_names(tmp_path, adk_vacuum_h5md):
    r = run_cli_here("rechunk", adk_vacuum_h5md, "-o", str(tmp_path / "x.h5md"), "--compression", "brotli")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "unknown compression 'brotli'" in r.stderr and "blosc-zstd" in r.stderr
    assert not (tmp_path / "x.h5md").exists()
