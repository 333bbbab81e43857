"""``split`` of a lossy file (written with ``--precision``): the parts keep the precision, the encoding and the
compression, so ``inspect`` of a part states the bound and ``verify`` of a part checks it.

References: the unsplit file read with h5py (stored values and attributes of each part's frames), and the
input DCD read by MDAnalysis (``verify`` compares each part with the DCD's frames of its range).
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import run_cli_here
from trajscale.convert.convert import convert
from trajscale.convert.split import split
from trajscale.convert.verify import verify
from trajscale.h5md.layout import Layout

POS = "particles/all/position/value"


def _attrs(ds) -> dict:
    """A dataset's attributes, comparable with == (arrays as lists)."""
    return {k: np.asarray(v).tolist() for k, v in ds.attrs.items()}


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("encoding", ["floats", "deltas"])
def test_parts_of_a_lossy_file_keep_its_precision(tmp_path, encoding):
    whole = tmp_path / "lossy.h5md"
    # nm on disk: a part re-rounded in Å would land on another grid than the file's
    convert(D.PSF, [D.DCD], str(whole), layout=Layout.parse("7", "gzip:1"), precision=0.01, encoding=encoding,
            units="gromacs")
    index = split(whole, tmp_path / "parts", 3)
    segments = json.loads(open(index).read())["segments"]
    assert len(segments) == 3
    with h5py.File(whole) as f:
        ref_attrs = _attrs(f[POS])
        stored = f[POS][()]
    bound = verify(D.PSF, [D.DCD], str(whole)).position_bound   # the unsplit file's (quantum / 2)
    assert 0 < bound <= 0.005
    for seg in segments:
        a, n, path = seg["start"], seg["n_frames"], str(tmp_path / "parts" / seg["path"])
        with h5py.File(path) as p:
            ds = p[POS]
            assert _attrs(ds) == ref_attrs   # precision, quantum, encoding and unit
            assert ds.dtype == stored.dtype and ds.compression == "gzip"
            np.testing.assert_array_equal(ds[()], stored[a:a + n])   # the very values on the very grid
        facts = json.loads(run_cli_here("inspect", path, "--json").stdout)
        assert facts["precision"]["angstrom"] == 0.01, facts.get("precision")
        assert "within 0.005 A" in run_cli_here("inspect", path).stdout
        rep = verify(D.PSF, [D.DCD], path, start=a, stop=a + n)   # against MDAnalysis's DCD frames
        assert rep.ok and rep.n_frames == n and rep.position_bound == bound, rep.problems
        assert 0 < rep.max_dx <= bound + 1e-5   # (float32 rounding of the decoded value, as verify allows)
