"""A second run on a remote H5MD object opens it from the HDF5 metadata that the first run's preparing
process kept in trajscale's cache: one request checks the object (ETag and size), none walks HDF5's
superblock, object headers and B-tree. A replaced object, a damaged entry or one that others may write is
never used."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import run_cli

from .conftest import BUCKET, TPR, FlakyProxy

pytestmark = [pytest.mark.remote, pytest.mark.cli, pytest.mark.slow]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One cache folder for the module (its first run parses the topology; the rest load it)."""
    return tmp_path_factory.mktemp("trajscale-cache")


def _run(url: str, env: dict, proxy: FlakyProxy, out) -> tuple[bytes, dict, list]:
    """A serial CA RMSD of ``url`` through ``proxy``: (its CSV, its preparing process's fetch counts, the GETs
    the server saw)."""
    del proxy.gets[:]
    report = out.with_suffix(".json")
    proc = run_cli("run", "rmsd", TPR, url, "--select", "name CA", "--executor", "serial", "--out", str(out),
                   "--report", str(report), "--overwrite", "--storage-option", f"endpoint_url={proxy.endpoint}",
                   env=env)
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes(), json.loads(report.read_text())["meta"]["fetched_prepare"], list(proxy.gets)


def _local(local: str, env: dict, out) -> bytes:
    proc = run_cli("run", "rmsd", TPR, local, "--select", "name CA", "--executor", "serial", "--out", str(out),
                   env=env)
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


def _entry(cache_dir, url: str):
    found = [p for p in (cache_dir / "hdf5-metadata").glob("*.json") if json.loads(p.read_text())["url"] == url]
    assert len(found) == 1, found
    return found[0]


def test_a_second_run_opens_the_object_from_the_cached_metadata(s3_server, adk_stores, cache_dir, tmp_path):
    local, url, _ = adk_stores["plain"]
    env = {**s3_server.subprocess_env(), "TRAJSCALE_CACHE_DIR": str(cache_dir)}
    want = _local(local, env, tmp_path / "local.csv")
    proxy = FlakyProxy(s3_server.endpoint, failures=0)
    try:
        first, root1, gets1 = _run(url, env, proxy, tmp_path / "first.csv")
        second, root2, gets2 = _run(url, env, proxy, tmp_path / "second.csv")
    finally:
        proxy.close()
    assert first == second == want
    entry = _entry(cache_dir, url)
    assert entry.stat().st_mode & 0o777 == 0o600 and entry.parent.stat().st_mode & 0o777 == 0o700
    # the first run: its look at the object (its first 256 KiB, which hold the reference frame's CA atoms),
    # HDF5's metadata blocks (the one after the frames holds every frame's time, step and box); the second:
    # the look alone
    assert root1["requests"] >= 2 and root2["requests"] == 1, (root1, root2)
    assert len(gets2) == len(gets1) - (root1["requests"] - root2["requests"])


def test_a_replaced_object_is_opened_from_its_own_metadata(s3_server, adk_stores, cache_dir, tmp_path):
    """The same key, new bytes (another ETag and size): the old object's entry is not used, and the run's
    numbers are the new object's."""
    plain, lossy = adk_stores["plain"][0], adk_stores["lossy"][0]
    url = f"s3://{BUCKET}/cache-replaced.h5md"
    env = {**s3_server.subprocess_env(), "TRAJSCALE_CACHE_DIR": str(cache_dir)}
    client = s3_server.client()
    proxy = FlakyProxy(s3_server.endpoint, failures=0)
    try:
        client.upload_file(plain, BUCKET, "cache-replaced.h5md")
        old, root_old, _ = _run(url, env, proxy, tmp_path / "old.csv")
        client.upload_file(lossy, BUCKET, "cache-replaced.h5md")
        new, root_new, _ = _run(url, env, proxy, tmp_path / "new.csv")
    finally:
        proxy.close()
    assert old == _local(plain, env, tmp_path / "plain.csv")
    assert new == _local(lossy, env, tmp_path / "lossy.csv") != old
    assert root_new["requests"] >= 4   # HDF5's metadata fetched again
    assert len([p for p in (cache_dir / "hdf5-metadata").glob("*.json")
                if json.loads(p.read_text())["url"] == url]) == 2   # one entry per ETag and size


@pytest.mark.parametrize("damage", ["bytes", "others-may-write"])
def test_a_damaged_or_foreign_entry_is_not_used(s3_server, adk_stores, cache_dir, tmp_path, damage):
    """An entry whose bytes no longer match its digest, or that others may write, is passed over: the
    object's metadata is fetched again and the numbers are right."""
    local = adk_stores["gzip"][0]
    key = f"cache-{damage}.h5md"
    url = f"s3://{BUCKET}/{key}"
    env = {**s3_server.subprocess_env(), "TRAJSCALE_CACHE_DIR": str(cache_dir)}
    s3_server.client().upload_file(local, BUCKET, key)
    proxy = FlakyProxy(s3_server.endpoint, failures=0)
    try:
        _, fresh, _ = _run(url, env, proxy, tmp_path / "first.csv")
        entry = _entry(cache_dir, url)
        if damage == "bytes":
            got = json.loads(entry.read_text())
            start, text = got["pieces"][0]
            got["pieces"][0] = [start, ("A" if text[0] != "A" else "B") + text[1:]]   # another first byte
            entry.write_text(json.dumps(got))
        else:
            os.chmod(entry, 0o666)
        again, root, _ = _run(url, env, proxy, tmp_path / "again.csv")
    finally:
        proxy.close()
    assert again == _local(local, env, tmp_path / "local.csv")
    # fetched as a run without an entry fetches (a run from a good entry makes its one look at the object)
    assert root["requests"] == fresh["requests"] > 1, (fresh, root)
