"""Several URLs as the parts of one trajectory: each stays the URL it is (a list of URLs is a list of
locations, never a path joined to the working folder), in ``trajscale run``, ``trajscale.run``,
``open_dataset`` and MDAnalysis's TRAJSCALE reader, with the storage options given as a parameter.

Against the suite's real S3 server (moto), its objects also served over plain http; the reference is
MDAnalysis reading the whole local XTC the parts were cut from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli_here

from .conftest import BUCKET, CREDENTIALS, TPR, XTC

pytestmark = pytest.mark.remote


@pytest.fixture(scope="module")
def xtc_parts(s3_server, tmp_path_factory):
    """AdK's XTC cut in two at frame 5 (whole frames; MDAnalysis's offsets), uploaded public-read:
    ``(local paths, s3:// URLs, http:// URLs)``."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(XTC) as f:
        cut = int(f.offsets[5])
    data = Path(XTC).read_bytes()
    folder = tmp_path_factory.mktemp("parts")
    local = [folder / "adk.part0001.xtc", folder / "adk.part0002.xtc"]
    local[0].write_bytes(data[:cut])
    local[1].write_bytes(data[cut:])
    client = s3_server.client()
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    for p in local:
        client.upload_file(str(p), BUCKET, f"xtc/{p.name}", ExtraArgs={"ACL": "public-read"})
    return ([str(p) for p in local], [f"s3://{BUCKET}/xtc/{p.name}" for p in local],
            [f"{s3_server.endpoint}/{BUCKET}/xtc/{p.name}" for p in local])


@pytest.fixture(scope="module")
def mda_rmsd():
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms

    return rms.RMSD(mda.Universe(TPR, XTC), select="name CA").run().results.rmsd[:, 2]


def _s3_options(server) -> dict:
    """The server and its credentials as ``storage_options`` (none of it in the environment)."""
    return {"endpoint_url": server.endpoint, "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "client_kwargs": {"region_name": "us-east-1"}}


@pytest.mark.cli
@pytest.mark.slow(seconds=4)
@pytest.mark.parametrize("scheme", ["s3", "http"])
def test_run_of_url_parts_equals_the_local_parts(s3_server, xtc_parts, tmp_path, scheme, mda_rmsd):
    local, s3, http = xtc_parts
    urls = s3 if scheme == "s3" else http
    out, here = tmp_path / "url.csv", tmp_path / "local.csv"
    for parts, csv in ((urls, out), (local, here)):
        proc = run_cli_here("run", "rmsd", TPR, *parts, "--select", "name CA", "--executor", "serial", "--out",
                            str(csv), env=s3_server.subprocess_env(), cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == here.read_bytes()
    rmsd = np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1)
    np.testing.assert_allclose(rmsd, mda_rmsd, atol=1e-4)


def test_trajscale_run_of_url_parts_takes_storage_options(s3_server, xtc_parts, mda_rmsd, monkeypatch):
    """``trajscale.run(..., storage_options=...)``: the parts behind s3:// URLs, the server and the
    credentials given as the parameter alone (the environment names another endpoint)."""
    import trajscale as ts

    for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")   # nothing answers there: the parameter wins
    _, s3, _ = xtc_parts
    r = ts.run(ts.RMSD(select="name CA"), TPR, s3, storage_options=_s3_options(s3_server))
    np.testing.assert_allclose(r.rmsd, mda_rmsd, atol=1e-4)
    assert r.report.n_frames == len(mda_rmsd)


def test_open_dataset_and_the_mdanalysis_reader_read_url_parts(s3_server, xtc_parts):
    import MDAnalysis as mda

    import trajscale as ts
    import trajscale.mda  # noqa: F401 - registers format TRAJSCALE

    _, _, http = xtc_parts
    ref = mda.Universe(TPR, XTC)
    expected = np.array([t.positions.copy() for t in ref.trajectory])
    ds = ts.open_dataset(TPR, http, storage_options={"timeout": 30})
    np.testing.assert_allclose(ds.positions.values, expected, atol=1e-3)
    u = mda.Universe(TPR, http, format="TRAJSCALE", storage_options={"timeout": 30})
    assert u.trajectory.n_frames == len(expected)
    np.testing.assert_allclose(np.array([t.positions.copy() for t in u.trajectory]), expected, atol=1e-3)
