"""``open_source`` of a URL opens the object once: the store whose first request told the registry the
format is the one the Source reads (no second ``RemoteObject`` for the Source's ``guess_format`` or open)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from MDAnalysis.coordinates.H5MD import H5MDReader
from MDAnalysis.coordinates.XTC import XTCReader
from MDAnalysisTests import datafiles as D

from .conftest import BUCKET

pytestmark = pytest.mark.remote


@pytest.mark.parametrize("path,reader", [(D.H5MD_xvf, H5MDReader), (D.XTC, XTCReader)])
def test_a_url_is_opened_once(s3_env, monkeypatch, path, reader):
    from trajscale.sources import open_source
    from trajscale.storage.location import Location
    from trajscale.storage.objects import RemoteObject

    client = s3_env.client()
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    key = f"opened-once/{os.path.basename(path)}"
    client.upload_file(path, BUCKET, key)
    url = f"s3://{BUCKET}/{key}"
    opened = []
    real = RemoteObject.__init__

    def counted(self, location, *args, **kw):   # (a spy: the real object is made, and counted)
        opened.append(location)
        real(self, location, *args, **kw)

    monkeypatch.setattr(RemoteObject, "__init__", counted)
    with open_source(url) as src:
        assert opened == [url]
        assert src.store is not None and src.store.c_openable_path is None
        # (asked by intent: each read is a request, no file on this node holds the bytes; told without I/O too)
        assert src.store.costs_request and src.store.node_local_copy is None and Location(url).costs_request
        got = src.read(0, 1).positions[0]
    want = reader(path).ts.positions
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
