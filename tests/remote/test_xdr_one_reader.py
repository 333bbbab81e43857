"""An XTC/TRR read from a local path and from a URL goes through one reader: the same XDRSource code, the same
offsets index and the same frame reader over the file's byte store, and every block equals MDAnalysis's own
XTCReader/TRRReader (the independent reference) to the bit, for every atom, a selection and strides."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .conftest import BUCKET, XTC

pytestmark = pytest.mark.remote

TRR = str(Path(XTC).with_suffix(".trr"))


def _reference(path: str, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Every frame as MDAnalysis's own reader gives it (Å, degrees, ps)."""
    import MDAnalysis as mda

    reader = mda.coordinates.XTC.XTCReader(path) if path.endswith(".xtc") else mda.coordinates.TRR.TRRReader(path)
    got: dict[str, list] = {f: [] for f in (*fields, "box", "time", "step")}
    with reader:
        for ts in reader:
            for f in fields:
                got[f].append(getattr(ts, {"position": "positions", "velocity": "velocities",
                                           "force": "forces"}[f]).copy())
            got["box"].append(ts.dimensions.copy())
            got["time"].append(ts.time)
            got["step"].append(ts.data["step"])
    return {k: np.asarray(v) for k, v in got.items()}


@pytest.mark.parametrize("path, fields", [(XTC, ("position",)), (TRR, ("position", "velocity"))],
                         ids=["xtc", "trr"])
def test_a_local_path_and_a_url_give_mdanalysis_blocks_through_one_reader(s3_env, adk_stores, tmp_path,
                                                                          monkeypatch, path, fields):
    from trajscale.sources import open_source
    from trajscale.storage.bytestore import LocalFile
    from trajscale.storage.files import Fetched, InPlace
    from trajscale.storage.objects import RemoteObject
    from trajscale.xdr.source import XDRSource

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))   # (an object's scan is kept there)
    key = f"one-reader/{Path(path).name}"
    s3_env.client().upload_file(path, BUCKET, key)
    ref = _reference(path, fields)
    n = len(ref["time"])
    sel = np.array([0, 5, 1000, 20000, 47680])
    with open_source(path) as local, open_source(f"s3://{BUCKET}/{key}") as remote:
        assert type(local) is type(remote) is XDRSource   # one Source class, the registry's, for both
        assert isinstance(local.store, LocalFile) and isinstance(local._view, InPlace)
        assert isinstance(remote.store, RemoteObject) and isinstance(remote._view, Fetched)
        assert local.n_frames == remote.n_frames == n and local.fields == remote.fields == fields
        for atoms, start, stop, stride in [(None, 0, n, 1), (sel, 0, n, 1), (sel, 1, n, 3), (None, n - 2, n, 1)]:
            want = slice(start, stop, stride)
            a = local.read(start, stop, atoms, fields, stride)
            b = remote.read(start, stop, atoms, fields, stride)
            for f, attr in (("position", "positions"), ("velocity", "velocities"), ("force", "forces")):
                if f in fields:
                    expect = ref[f][want] if atoms is None else ref[f][want][:, atoms]
                    np.testing.assert_array_equal(getattr(a, attr), expect)
                    np.testing.assert_array_equal(getattr(b, attr), expect)
            for got in (a, b):
                np.testing.assert_array_equal(got.box, ref["box"][want].astype(np.float32))
                np.testing.assert_array_equal(got.time, ref["time"][want])
                np.testing.assert_array_equal(got.step, ref["step"][want])
        assert local.remote_stats() is None and remote.remote_stats()["requests"] >= 2   # its bytes came by ranges
        # a worker reopens either from its config, with the offsets shipped: the same blocks, nothing rescanned
        for src in (local, remote):
            with XDRSource(**{k: v for k, v in src.get_config().items() if k != "kind"}) as again:
                np.testing.assert_array_equal(again.read(2, 5, sel, fields).positions, ref["position"][2:5][:, sel])
