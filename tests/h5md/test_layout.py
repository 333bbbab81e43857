"""Layout planning, parsing and the read-amplification model."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from trajscale.errors import ConfigError
from trajscale.h5md.inspect import amplification, inspect_file
from trajscale.h5md.layout import Layout, plan_frames_per_chunk


@pytest.mark.parametrize("n_atoms", [1, 100, 3341, 47681, 1_000_000])
def test_planned_chunks_hold_whole_frames_of_1_to_4_mib(n_atoms):
    frames = plan_frames_per_chunk(n_atoms)
    chunk = Layout("auto").chunk_shape(n_atoms)
    assert chunk == (frames, n_atoms, 3)
    nbytes = frames * n_atoms * 12
    # never splits atoms; ~1-4 MiB unless a single frame is already bigger
    assert nbytes <= 4 * 2**20 or frames == 1
    assert nbytes >= 2**20 or n_atoms * 12 * (frames + 1) > 4 * 2**20


def test_parse():
    assert Layout.parse("frame").chunk_shape(10) == (1, 10, 3)
    assert Layout.parse("7").chunk_shape(10) == (7, 10, 3)
    assert Layout.parse("contiguous").chunk_shape(10) is None
    lay = Layout.parse("auto", "gzip:9")
    assert lay.h5py_kwargs() == {"compression": "gzip", "compression_opts": 9, "shuffle": True}
    assert Layout.parse("auto", "lzf").h5py_kwargs()["compression"] == "lzf"
    for bad in [("0", "none"), ("weird", "none"), ("auto", "gzip:12"), ("auto", "snappy"), ("contiguous", "gzip")]:
        with pytest.raises(ConfigError):
            Layout.parse(*bad)


def test_amplification_model():
    shape = (1000, 47681, 3)
    assert amplification(shape, None, 1, None) == 1.0                 # contiguous
    assert amplification(shape, (1, 47681, 3), 1, None) == 1.0        # frame chunks
    assert amplification(shape, (4, 47681, 3), 1, None) == 4.0
    assert amplification(shape, (4, 47681, 3), 100, None) == 1.0
    assert amplification(shape, (1, 47681, 3), 100, 150) == pytest.approx(47681 / 150)
    # pyh5md/h5py style chunks (32 frames x 128 atoms): a frame drags in 32 frames
    assert amplification(shape, (32, 128, 3), 1, None) == pytest.approx(32 * 47744 / 47681, rel=1e-3)
    # uncompressed chunks bigger than the cache are read in place
    assert amplification(shape, (3, 47681, 3), 100, 150, compressed=False, cache_bytes=2**20) == 1.0
    assert amplification(shape, (1, 47681, 3), 100, 150, compressed=False, cache_bytes=2**20) > 300
    assert amplification(shape, (1, 47681, 3), 100, 150, compressed=False, cache_bytes=0) == 1.0
    assert amplification(shape, (32, 128, 3), 1, None, compressed=False, cache_bytes=2**20) > 30


def test_inspect_warns_on_seed_style_chunks(tmp_path):
    path = tmp_path / "bad.h5md"
    with h5py.File(path, "w") as f:
        g = f.create_group("particles/all/position")
        g.create_dataset("value", data=np.zeros((64, 1000, 3), np.float32), chunks=(32, 128, 3))
        g.create_dataset("step", data=np.arange(64))
        g.create_dataset("time", data=np.arange(64.0))
    facts = inspect_file(path, assume_units="Angstrom")   # the file states no units
    assert facts["chunks"] == [32, 128, 3]
    assert facts["read_amplification_hdf5_default"]["one frame"] > 30
    assert facts["read_amplification"]["one frame"] == 1.0      # trajscale reads in place
    assert any("--chunks auto" in w and "mix 32 frames" in w for w in facts["warnings"])


def test_inspect_quiet_on_planned_layout(adk_vacuum_h5md):
    facts = inspect_file(adk_vacuum_h5md)
    assert facts["warnings"] == []
    assert facts["n_atoms"] == 3341 and facts["n_frames"] == 98
    assert facts["units"]["position"] == "Angstrom"
