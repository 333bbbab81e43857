"""Selected atoms read through their span in cache-sized slabs: same values as MDAnalysis, C-contiguous."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
import pytest

from trajscale.convert.convert import convert
from trajscale.h5md import source as h5md_module
from trajscale.h5md.layout import Layout
from trajscale.h5md.source import H5MDSource


@pytest.fixture(scope="module")
def chunked(tmp_path_factory, adk_vacuum):
    out = tmp_path_factory.mktemp("gather") / "adk7.h5md"
    convert(adk_vacuum[0], [adk_vacuum[1]], str(out), layout=Layout.parse("7"))
    return str(out)


@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("slab_frames", [7, 21, 1000])
def test_gathered_selection_equals_mdanalysis(chunked, adk_vacuum, monkeypatch, reuse, slab_frames):
    u = mda.Universe(*adk_vacuum)
    atoms = u.select_atoms("name CA or resid 100").indices
    ref = u.trajectory.timeseries(u.atoms[atoms], order="fac")
    span = int(atoms.max() - atoms.min() + 1)
    monkeypatch.setattr(h5md_module, "GATHER_SLAB_BYTES", slab_frames * span * 12)
    with H5MDSource(chunked) as src:
        src.reuse_buffers = reuse
        for start, stop in [(0, 98), (3, 60), (50, 51)]:
            block = src.read(start, stop, atoms)
            assert block.positions.flags.c_contiguous   # kernels read it without a copy
            np.testing.assert_array_equal(block.positions, ref[start:stop])
