"""What an ensemble run fetches from a real S3 server (moto's) against what a local run of the same
trajectories reads: the CA RMSD of four short H5MD trajectories of AdK (20 to 50 frames x 3,341 atoms,
0.96 to 2.2 MB each: where a fixed cost per trajectory weighs most), each run a whole process with
trajscale's cache empty (a first run on the data).

The bytes fetched are counted by an HTTP proxy in front of the server, from the ranges the server was
asked for (not by trajscale); the local run's bytes are its report's. The tasks fetch the bytes a local
run reads and nothing more (no HDF5 metadata per worker or per task); the process that prepares the
run adds a fixed cost per trajectory (its first request of 256 KiB, which also holds the reference frame,
and the B-tree nodes and first rows of time and step, a few kB past it: not the blocks holding them),
which stays under a fifth of these trajectories' bytes.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

if not all(importlib.util.find_spec(m) for m in ("obstore", "moto", "flask")):   # looked up, not imported
    pytest.skip("obstore and moto[server] are not installed", allow_module_level=True)

from tests.remote.conftest import BUCKET, FlakyProxy, s3_server  # noqa: E402,F401 - the session's S3 server

pytestmark = [pytest.mark.remote, pytest.mark.cli, pytest.mark.slow]

#: The trajectories' lengths (frames of AdK's DCD).
FRAMES = (20, 30, 40, 50)
N_TRAJECTORIES = len(FRAMES)


@pytest.fixture
def adk_h5md(tmp_path_factory):
    """AdK in vacuum (PSF + DCD) cut to each of :data:`FRAMES` frames, as H5MD files (what ``trajscale
    convert --stop N`` writes; converted in this process: one import of MDAnalysis for the four)."""
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.convert.convert import convert

    folder = tmp_path_factory.mktemp("adk-h5md")
    paths = [folder / f"adk{n}.h5md" for n in FRAMES]
    for n, path in zip(FRAMES, paths, strict=True):
        convert(PSF, [DCD], str(path), stop=n, progress=False)
    return paths


def range_bytes(gets, sizes: dict) -> int:
    """Bytes the server sent for the GETs ``(path, Range)`` (a range past the end is cut at the object's end)."""
    total = 0
    for path, asked in gets:
        size = sizes[path.split("?")[0].lstrip("/")]
        if asked is None:
            total += size
            continue
        first, _, last = asked.partition("=")[2].partition("-")
        total += min(int(last), size - 1) - int(first) + 1
    return total


def run(catalog: str, tmp_path, name: str, env: dict, *options: str) -> dict:
    got = subprocess.run([sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", "--ensemble", catalog,
                          "--select", "name CA", "-q", "--results", str(tmp_path / f"{name}-results"),
                          "--out", str(tmp_path / f"{name}.parquet"), "--report", str(tmp_path / f"{name}.json"),
                          *options], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    return json.loads((tmp_path / f"{name}.json").read_text())


def test_bytes_fetched_from_s3_for_short_trajectories_are_within_a_fifth_of_a_local_runs(adk_h5md, s3_server, tmp_path):  # noqa: F811
    from MDAnalysisTests.datafiles import PSF

    client = s3_server.client()
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    rows = ["name,topology,trajectory,replica"]
    sizes = {}
    for k, path in enumerate(adk_h5md):
        key = f"ensemble-bytes/rep{k}.h5md"
        client.upload_file(str(path), BUCKET, key)
        sizes[f"{BUCKET}/{key}"] = path.stat().st_size
        rows.append(f"rep{k},{PSF},rep{k}.h5md,{k}")
    text = "\n".join(rows) + "\n"
    client.put_object(Bucket=BUCKET, Key="ensemble-bytes/catalog.csv", Body=text.encode())
    sizes[f"{BUCKET}/ensemble-bytes/catalog.csv"] = len(text.encode())
    local = tmp_path / "local"
    local.mkdir()
    for k, path in enumerate(adk_h5md):
        (local / f"rep{k}.h5md").symlink_to(path)
    (local / "catalog.csv").write_text(text)

    proxy = FlakyProxy(s3_server.endpoint, failures=0)   # forwards every request, and notes its range
    try:
        env = {**s3_server.subprocess_env(), "AWS_ENDPOINT_URL": proxy.endpoint,
               "TRAJSCALE_CACHE_DIR": str(tmp_path / "cache")}   # a first run: no HDF5 metadata kept from before
        # the same executor as the run from S3: its trajectories are prepared where that run's are
        here = run(str(local / "catalog.csv"), tmp_path, "local", env, "--executor", "processes", "-n", "2")
        proxy.gets.clear()
        there = run(f"s3://{BUCKET}/ensemble-bytes/catalog.csv", tmp_path, "remote", env,
                    "--executor", "processes", "-n", "2")
        gets = list(proxy.gets)
    finally:
        proxy.close()

    read_locally = sum(t["bytes_read"] for t in here["tasks"])
    assert read_locally >= sum(FRAMES) * 214 * 12   # at least every CA atom's coordinates
    fetched = range_bytes([g for g in gets if not g[0].endswith("catalog.csv")], sizes)
    # nothing within an object's first request is asked for again (the reference frame lies there)
    from trajscale.storage.objects import HEAD_BYTES

    again = [g for g in gets if g[1] and not g[1].startswith("bytes=0-")
             and int(g[1].rpartition("-")[2]) < HEAD_BYTES]
    assert not again, again
    assert fetched <= 1.2 * read_locally, (fetched, read_locally)
    # the report counts what the server sent; the tasks fetched what a local run reads, no more
    tasks = sum(t["bytes_fetched"] for t in there["tasks"])
    prepare = there["meta"].get("fetched_prepare", {}).get("bytes", 0)
    # the preparing process's metadata past the first request comes in one request per trajectory
    assert there["meta"]["fetched_prepare"]["requests"] <= 2 * N_TRAJECTORIES, there["meta"]["fetched_prepare"]
    assert tasks + prepare == fetched, (tasks, prepare, fetched)
    assert tasks == read_locally, (tasks, read_locally)
    assert (tmp_path / "remote.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()
