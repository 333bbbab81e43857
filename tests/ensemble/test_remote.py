"""An ensemble whose trajectories (and catalog) are objects on a real S3 server (moto's): the numbers of the
same ensemble read from local files, bit for bit; a glob over an object prefix lists its members."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto.server")

import trajscale as ts  # noqa: E402
from tests.remote.conftest import BUCKET, CREDENTIALS, s3_env, s3_server  # noqa: E402,F401 - the session's S3 server

pytestmark = pytest.mark.remote

NAMES = ("adk-0", "adk-2", "yiip-0")


@pytest.fixture
def uploaded(replicas, s3_env):  # noqa: F811 - the imported fixture
    client = s3_env.client()
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    lines = ["name,topology,trajectory,system"]
    for name in NAMES:
        top, xtc, labels = replicas["members"][name]
        client.upload_file(xtc, BUCKET, f"ensemble/{name}.xtc")
        lines.append(f"{name},{top},{name}.xtc,{labels['system']}")   # relative: beside the catalog's URL
    client.put_object(Bucket=BUCKET, Key="ensemble/catalog.csv", Body=("\n".join(lines) + "\n").encode())
    return f"s3://{BUCKET}/ensemble"


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_catalog_and_trajectories_behind_urls(replicas, uploaded, s3_server, executor):  # noqa: F811
    # the options travel with the run to its workers (a pool's forkserver may predate this test's environment)
    options = {"endpoint_url": s3_server.endpoint, "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
               "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}
    remote = ts.run(ts.RMSD(select="name CA"), f"{uploaded}/catalog.csv", executor=executor, n_workers=2,
                    storage_options=options)
    local = ts.run(ts.RMSD(select="name CA"), ts.Ensemble.from_catalog(replicas["catalog"]))
    assert remote.names == NAMES and not remote.refused
    assert all(m.trajectory[0].startswith("s3://") for m in remote.members)
    for name in NAMES:
        assert np.array_equal(remote[name].rmsd, local[name].rmsd)
    fetched = sum(t["bytes"] for t in remote.trajectories.per_trajectory)
    assert fetched > 0


def test_a_glob_over_an_object_prefix(replicas, uploaded):
    from MDAnalysisTests.datafiles import PSF

    ens = ts.Ensemble.from_glob(f"{uploaded}/adk-*.xtc", topology=PSF, labels=r"adk-(?P<replica>\d+)")
    assert ens.names == ("adk-0", "adk-2") and [m.labels["replica"] for m in ens] == [0, 2]
    r = ts.run(ts.RadiusOfGyration(select="name CA"), ens)
    local = ts.run(ts.RadiusOfGyration(select="name CA"), replicas["catalog"])
    for name in ens.names:
        assert np.array_equal(r[name].rgyr, local[name].rgyr)


def test_a_topology_behind_a_url(replicas, uploaded, s3_env):  # noqa: F811
    """The members' one topology is an object: fetched once by the process, the numbers those of the local file."""
    from MDAnalysisTests.datafiles import PSF

    from trajscale.ensemble import members

    s3_env.client().upload_file(PSF, BUCKET, "ensemble/adk.psf")
    ens = ts.Ensemble.from_glob(f"{uploaded}/adk-*.xtc", topology=f"{uploaded}/adk.psf")
    assert {m.topology for m in ens} == {f"{uploaded}/adk.psf"}
    r = ts.run(ts.RadiusOfGyration(select="name CA"), ens)
    local = ts.run(ts.RadiusOfGyration(select="name CA"), replicas["catalog"])
    assert r.names == ("adk-0", "adk-2") and not r.refused
    for name in r.names:
        assert np.array_equal(r[name].rgyr, local[name].rgyr)
    fetched = members._FETCHED[f"{uploaded}/adk.psf"]
    assert fetched.endswith("adk.psf") and open(fetched, "rb").read() == open(PSF, "rb").read()
