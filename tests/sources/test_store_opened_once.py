"""``open_source`` opens a file's bytes once: the store that tells the registry the format is the one the
Source reads (no second ``LocalFile`` for the Source's ``guess_format``, its open, or HDF5's)."""

from __future__ import annotations

import numpy as np
import pytest
from MDAnalysis.coordinates.H5MD import H5MDReader
from MDAnalysis.coordinates.XTC import XTCReader
from MDAnalysisTests import datafiles as D

from trajscale.sources import open_source
from trajscale.storage.bytestore import LocalFile


@pytest.mark.parametrize("path,reader", [(D.H5MD_xvf, H5MDReader), (D.XTC, XTCReader)])
def test_a_local_file_is_opened_once(monkeypatch, path, reader):
    opened = []
    real = LocalFile.__init__

    def counted(self, location):   # (a spy: the real store is made, and counted)
        opened.append(location)
        real(self, location)

    monkeypatch.setattr(LocalFile, "__init__", counted)
    with open_source(path) as src:
        assert opened == [path]
        assert src.store is not None and src.store.c_openable_path == path
        # (asked by intent: a read costs no request, and this node holds the file itself)
        assert not src.store.costs_request and src.store.node_local_copy == path
        got = src.read(0, 1).positions[0]
    want = reader(path).ts.positions
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
