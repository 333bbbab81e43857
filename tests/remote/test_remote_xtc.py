"""XTC files behind URLs, read from a real S3 server: frame offsets from the segment index that
``trajscale index`` wrote beside the parts, or from a local cache keyed by the object's ETag and size,
else from one scan in large blocks (never a request per frame header); the numbers are the local file's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli, run_cli_here

from .conftest import BUCKET, TPR, XTC

pytestmark = pytest.mark.remote

SELECT = ["--select", "name CA"]


def _env(server, cache: Path) -> dict:
    return {**server.subprocess_env(), "XDG_CACHE_HOME": str(cache)}


def _run(server, tmp_path, name, traj, *extra, cache=None):
    """``trajscale run rmsd`` of ``traj``: in this process, or in its own where it starts a pool of processes
    (which this process, with the server's threads, would start by a forkserver)."""
    out = tmp_path / f"{name}.csv"
    argv = ("run", "rmsd", TPR, traj, "--out", str(out), *SELECT, "-v", "--overwrite", *extra)
    env = _env(server, cache or tmp_path / "cache")
    proc = run_cli(*argv, env=env) if "processes" in extra else run_cli_here(*argv, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc, out.read_bytes()


#: A local file's CSV by the file's path: the tests compare their URLs' runs with the same local runs (AdK's
#: XTC six times, its TRR twice), each a serial process, run once per file in this module instead.
_LOCAL_CSV: dict[str, bytes] = {}


def _local(server, tmp_path, traj, name="local"):
    if str(traj) not in _LOCAL_CSV:
        _LOCAL_CSV[str(traj)] = _run(server, tmp_path, name, traj, "--executor", "serial",
                                     cache=tmp_path / "local-cache")[1]
    return _LOCAL_CSV[str(traj)]


def _upload(server, local, key) -> str:
    server.client().upload_file(str(local), BUCKET, key)
    return f"s3://{BUCKET}/{key}"


def _scans(stderr: str) -> list[int]:
    """The requests of each header scan the run made (its debug lines)."""
    return [int(n) for n in re.findall(r"frame offsets scanned \(\d+ frames\) in (\d+) requests", stderr)]


def _mda_offsets(path) -> list[int]:
    """Frame offsets by MDAnalysis's own XTC reader (the independent reference)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(str(path)) as f:
        return [int(o) for o in f.offsets]


def _fetched(report: Path) -> tuple[int, int]:
    tasks = json.loads(report.read_text())["tasks"]
    return sum(t["requests"] for t in tasks), sum(t["bytes_fetched"] for t in tasks)


@pytest.mark.cli
@pytest.mark.parametrize("executor", [["--executor", "serial"], ["--executor", "processes", "-n", "2"]])
def test_an_xtc_url_gives_the_local_files_numbers(s3_server, adk_stores, tmp_path, executor):
    url = _upload(s3_server, XTC, f"xtc/{executor[1]}/adk_oplsaa.xtc")
    report = tmp_path / "report.json"
    proc, got = _run(s3_server, tmp_path, "remote", url, *executor, "--report", str(report))
    assert got == _local(s3_server, tmp_path, XTC)
    requests, nbytes = _fetched(report)
    assert requests >= 1 and nbytes >= Path(XTC).stat().st_size * 0.9   # every frame's bytes, by range requests
    n_frames = len(_mda_offsets(XTC))
    scans = _scans(proc.stderr)
    assert len(scans) == 1 and scans[0] < n_frames, proc.stderr   # one scan in large blocks
    assert "testing-secret" not in proc.stderr + proc.stdout


def test_the_second_run_takes_the_offsets_from_the_cache_and_a_replaced_object_is_scanned_again(
        s3_server, adk_stores, tmp_path):
    url = _upload(s3_server, XTC, "xtc/cached/adk.xtc")
    cache = tmp_path / "cache"
    first, got = _run(s3_server, tmp_path, "first", url, "--executor", "serial", cache=cache)
    assert got == _local(s3_server, tmp_path, XTC)
    assert len(_scans(first.stderr)) == 1
    entries = list((cache / "trajscale" / "offsets").iterdir())
    assert len(entries) == 1 and entries[0].stat().st_mode & 0o077 == 0   # the user's only

    second, got = _run(s3_server, tmp_path, "second", url, "--executor", "serial", cache=cache)
    assert got == _local(s3_server, tmp_path, XTC)
    assert _scans(second.stderr) == [] and "frame offsets from the local cache" in second.stderr

    # the same key, another object (its first 6 frames): another ETag and size, so the cache is not used
    offsets = _mda_offsets(XTC)
    shorter = tmp_path / "short.xtc"
    shorter.write_bytes(Path(XTC).read_bytes()[:offsets[6]])
    _upload(s3_server, shorter, "xtc/cached/adk.xtc")
    third, got = _run(s3_server, tmp_path, "third", url, "--executor", "serial", cache=cache)
    assert len(_scans(third.stderr)) == 1, third.stderr
    assert got == _local(s3_server, tmp_path, shorter, "local-short")
    assert got.count(b"\n") < _local(s3_server, tmp_path, XTC).count(b"\n")


@pytest.mark.cli
def test_a_chain_of_xtc_parts_behind_urls_reads_the_offsets_its_index_holds(s3_server, adk_stores, tmp_path):
    """Two parts of AdK (split at frame 5, where MDAnalysis finds it), described by ``trajscale index``
    beside them: read from S3 with the index's offsets (no scan), the local chain's numbers."""
    offsets = _mda_offsets(XTC)
    data = Path(XTC).read_bytes()
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "part_0.xtc").write_bytes(data[:offsets[5]])
    (parts / "part_1.xtc").write_bytes(data[offsets[5]:])
    proc = run_cli_here("index", str(parts / "part_0.xtc"), str(parts / "part_1.xtc"), "-o",
                        str(parts / "index.json"))
    assert proc.returncode == 0, proc.stderr
    index = json.loads((parts / "index.json").read_text())
    assert [s["path"] for s in index["segments"]] == ["part_0.xtc", "part_1.xtc"]
    assert all(s.get("offsets") for s in index["segments"])   # written beside the parts, for remote readers
    for name in ("part_0.xtc", "part_1.xtc", "index.json"):
        _upload(s3_server, parts / name, f"chain/{name}")
    url = f"s3://{BUCKET}/chain/index.json"
    local = _local(s3_server, tmp_path, str(parts / "index.json"))
    assert local == _local(s3_server, tmp_path, XTC, "whole")   # the chain is the whole file
    for executor in (["--executor", "serial"], ["--executor", "processes", "-n", "2"]):
        report = tmp_path / f"chain-{executor[1]}.json"
        proc, got = _run(s3_server, tmp_path, f"chain-{executor[1]}", url, *executor, "--report", str(report))
        assert got == local
        assert _scans(proc.stderr) == [], proc.stderr   # the index's offsets: no part scanned
        requests, nbytes = _fetched(report)
        assert 1 <= requests and nbytes >= len(data) * 0.9
    assert not (tmp_path / "cache" / "trajscale" / "offsets").exists()


def test_inspect_of_an_xtc_url_says_what_the_local_file_does(s3_server, adk_stores, tmp_path):
    import MDAnalysis as mda

    url = _upload(s3_server, XTC, "xtc/inspect/adk.xtc")
    env = _env(s3_server, tmp_path / "cache")
    remote = run_cli_here("inspect", url, "--json", env=env)
    assert remote.returncode == 0, remote.stderr
    got = json.loads(remote.stdout)
    u = mda.Universe(TPR, XTC)
    assert (got["format"], got["n_frames"], got["n_atoms"]) == ("xtc", u.trajectory.n_frames, u.atoms.n_atoms)
    assert got["file_bytes"] == Path(XTC).stat().st_size and got["path"] == url
    local = json.loads(run_cli_here("inspect", XTC, "--json", env=env).stdout)
    assert got["time"] == local["time"]


@pytest.mark.cli
def test_a_trr_behind_an_http_url_gives_the_local_files_numbers(s3_server, adk_stores, tmp_path):
    trr = str(Path(XTC).with_suffix(".trr"))
    s3_server.client().upload_file(trr, BUCKET, "trr/adk_oplsaa.trr", ExtraArgs={"ACL": "public-read"})
    url = f"{s3_server.endpoint}/{BUCKET}/trr/adk_oplsaa.trr"
    for executor in (["--executor", "serial"], ["--executor", "processes", "-n", "2"]):
        proc, got = _run(s3_server, tmp_path, f"trr-{executor[1]}", url, *executor)
        assert got == _local(s3_server, tmp_path, trr, "local-trr")
    assert len(list((tmp_path / "cache" / "trajscale" / "offsets").iterdir())) == 1
