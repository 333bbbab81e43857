"""An ensemble whose trajectories (and catalog) are objects on a real S3 server (moto's) or a GCS one
(fake-gcs-server): the numbers of the same ensemble read from local files, bit for bit; a glob over an object
prefix lists its members, in pages, with no request per object."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

if not all(importlib.util.find_spec(m) for m in ("obstore", "moto", "flask")):   # looked up, not imported
    pytest.skip("obstore and moto[server] are not installed", allow_module_level=True)

import trajscale as ts  # noqa: E402
from tests.remote.conftest import BUCKET, CREDENTIALS, gcs_server, s3_env, s3_server  # noqa: E402,F401 - the session's servers

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
    fetched = remote.trajectories.bytes_read
    assert fetched > 0


@pytest.fixture
def uploaded_gcs(replicas, gcs_server):  # noqa: F811 - the imported fixture
    gcs_server.create_bucket("ensemble-glob")
    for name in NAMES:
        with open(replicas["members"][name][1], "rb") as fh:
            gcs_server.put("ensemble-glob", f"runs/{name}.xtc", fh.read())
    return "gs://ensemble-glob/runs", gcs_server.options


@pytest.mark.parametrize("scheme, executor", [("s3", "processes"), ("gs", "serial")])
def test_a_glob_over_an_object_prefix(replicas, request, scheme, executor):
    """The prefix listed through the store (S3's and GCS's own listing), then read as local files are: a pool
    started after the listing (which started the client's runtime) computes what the local run does."""
    from MDAnalysisTests.datafiles import PSF

    where, options = (request.getfixturevalue("uploaded"), None) if scheme == "s3" \
        else request.getfixturevalue("uploaded_gcs")
    ens = ts.Ensemble.from_glob(f"{where}/adk-*.xtc", topology=PSF, labels=r"adk-(?P<replica>\d+)",
                                storage_options=options)
    assert ens.names == ("adk-0", "adk-2") and [m.labels["replica"] for m in ens] == [0, 2]
    assert [m.trajectory[0] for m in ens] == [f"{where}/adk-0.xtc", f"{where}/adk-2.xtc"]
    r = ts.run(ts.RadiusOfGyration(select="name CA"), ens, executor=executor, n_workers=2, storage_options=options)
    local = ts.run(ts.RadiusOfGyration(select="name CA"), replicas["catalog"])
    for name in ens.names:
        assert np.array_equal(r[name].rgyr, local[name].rgyr)


def test_a_glob_over_many_objects_is_one_paged_listing(s3_env):  # noqa: F811 - the imported fixture
    """1,001 objects (more than a page of S3's listing): every one a member, from two requests (the listing's
    pages; no object opened), counted as this process's requests (a pool that forks after them must know)."""
    from MDAnalysisTests.datafiles import PSF
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    from tests.remote.stores import TcpProxy
    from trajscale.storage import fetched_here

    client = s3_env.client()
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    store = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]   # (straight in: a thousand PUTs over HTTP take seconds)
    names = [f"m{i:05d}" for i in range(1001)]
    for name in names:
        store.put_object(BUCKET, f"many/{name}.xtc", b"")
    store.put_object(BUCKET, "many/notes.txt", b"")
    proxy = TcpProxy("127.0.0.1", int(s3_env.endpoint.rsplit(":", 1)[1]))
    try:
        before = fetched_here()["requests"]
        ens = ts.Ensemble.from_glob(f"s3://{BUCKET}/many/*.xtc", topology=PSF,
                                    storage_options={"endpoint_url": f"http://{proxy.address}"})
        asked = proxy.requests
    finally:
        proxy.close()
    assert ens.names == tuple(names)
    assert asked == 2, f"{asked} requests for a listing of 1,001 objects"
    assert fetched_here()["requests"] > before


def test_a_glob_over_a_missing_bucket_is_one_line(s3_env):  # noqa: F811 - the imported fixture
    from trajscale.errors import InputFileError

    with pytest.raises(InputFileError) as err:
        ts.Ensemble.from_glob("s3://no-such-bucket/runs/*.xtc", storage_options={"retry_seconds": 2})
    text = str(err.value)
    assert "\n" not in text and text.startswith("s3://no-such-bucket/runs/*.xtc: ") and "no such bucket" in text, text


def test_a_topology_behind_a_url(replicas, uploaded, s3_env):  # noqa: F811
    """The members' one topology is an object: fetched once by the node, the numbers those of the local file."""
    from MDAnalysisTests.datafiles import PSF

    from trajscale.storage.nodecache import at_hand

    s3_env.client().upload_file(PSF, BUCKET, "ensemble/adk.psf")
    ens = ts.Ensemble.from_glob(f"{uploaded}/adk-*.xtc", topology=f"{uploaded}/adk.psf")
    assert {m.topology for m in ens} == {f"{uploaded}/adk.psf"}
    r = ts.run(ts.RadiusOfGyration(select="name CA"), ens)
    local = ts.run(ts.RadiusOfGyration(select="name CA"), replicas["catalog"])
    assert r.names == ("adk-0", "adk-2") and not r.refused
    for name in r.names:
        assert np.array_equal(r[name].rgyr, local[name].rgyr)
    again = at_hand(f"{uploaded}/adk.psf")   # (the node's copy the run made: found, not copied again)
    assert not again.copied and again.path.endswith(".psf") and open(again.path, "rb").read() == open(PSF, "rb").read()
    assert at_hand(PSF).path == PSF


#: A user's script: a glob listed with obstore in this process (not through trajscale's reads), then a pool.
GLOB_THEN_POOL = """
import sys
import numpy as np
import trajscale as ts
from MDAnalysisTests.datafiles import PSF
from trajscale.errors import ConfigError

ens = ts.Ensemble.from_glob(sys.argv[1] + "/adk-*.xtc", topology=PSF)
try:   # the listing's runtime is in this process now: a fork asked for is refused, in one line
    ts.run(ts.RMSD(select="name CA"), ens, executor="processes", n_workers=2, start_method="fork")
    print("REFUSED: no")
except ConfigError as exc:
    print("REFUSED:", exc)
pooled = ts.run(ts.RMSD(select="name CA"), ens, executor="processes", n_workers=2)
serial = ts.run(ts.RMSD(select="name CA"), ens, executor="serial")
assert pooled.names == serial.names == ("adk-0", "adk-2") and not pooled.refused
for name in serial.names:
    assert np.array_equal(pooled[name].rmsd, serial[name].rmsd), name
print("EQUAL")
"""


@pytest.mark.cli
@pytest.mark.slow(seconds=2)   # out of the quick tier: a whole script with a pool, ~2 s of CPU
def test_a_glob_over_an_object_prefix_then_a_process_pool(uploaded, s3_server):  # noqa: F811
    """The glob lists the prefix with obstore in the user's process (its runtime's threads run from then on);
    the pool started after it is not forked from that process (a forked worker died of SIGSEGV in obstore),
    and equals serial. A fresh process: this one runs the S3 server's threads, which rule fork out anyway."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", GLOB_THEN_POOL, uploaded], capture_output=True, text=True,
                          env=s3_server.subprocess_env(), timeout=300)
    assert proc.returncode == 0 and "EQUAL" in proc.stdout, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    refused = [ln for ln in proc.stdout.splitlines() if ln.startswith("REFUSED:")]
    assert len(refused) == 1 and "start_method='fork' refused" in refused[0], proc.stdout
    # (the listing's request thread, or the client's runtime: whichever is said first)
    assert "a URL client's runtime" in refused[0] or "trajscale-fetch" in refused[0], proc.stdout
