"""mdCATH on the Hugging Face Hub, ``hf://``, against the suite's Hub server (tests.remote.hub_server): the official
client (``huggingface_hub``) reads it as it reads the Hub; a run over a glob of a repository's domains gives the
bytes a run over the local files gives, reads every file at the commit its branch was at, pays each file's
redirect once whatever the number of ranges, and keeps to the Hub's manners (a token, 429s)."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import MDAnalysis as mda
import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import run_cli, run_cli_here
from trajscale.testing.mdcath import from_universe

from .hub_server import TOKEN, HubServer

pytestmark = pytest.mark.remote
REPO = "compsciencelab/mdcath"
DOMAINS = ("1adkA00", "2adkB01", "3adkC02")
GLOB = f"hf://datasets/{REPO}@main/data/mdcath_dataset_*.h5"


@pytest.fixture(scope="module")
def domains(tmp_path_factory) -> Path:
    """Three mdCATH-layout files (DCD's atoms, members of a few frames each), in ``data/`` of a folder."""
    folder = tmp_path_factory.mktemp("mdcath-hub") / "data"
    folder.mkdir()
    u = mda.Universe(D.PSF, D.DCD)
    for i, domain in enumerate(DOMAINS):
        from_universe(folder / f"mdcath_dataset_{domain}.h5", u, domain=domain, n_frames=(4 + i, 3, 5), seed=i)
    return folder


def publish(hub: HubServer, domains: Path, name: str = REPO, **kw) -> str:
    files = {f"data/{p.name}": p for p in sorted(domains.iterdir())}
    files["README.md"] = b"# mdCATH (the suite's copy)\n"
    return hub.commit(name, files, **kw)


@pytest.fixture
def hub(domains):
    with HubServer(page=2) as server:
        publish(server, domains)
        yield server


def ramachandran(where: str, out: Path, *more: str, env: dict | None = None, here: bool = True):
    args = ("run", "ramachandran", "--ensemble", where, "--sincos", "--out", str(out), *more)
    # (in the output's folder: an ensemble's results folder is made where it runs)
    return run_cli_here(*args, env=env, cwd=out.parent) if here else run_cli(*args, env=env, cwd=out.parent)


@pytest.fixture(scope="module")
def local_result(domains, tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("local") / "local.parquet"
    got = ramachandran(str(domains / "mdcath_dataset_*.h5"), out)
    assert got.returncode == 0, got.stderr
    return out.read_bytes()


@pytest.mark.cli
def test_the_official_client_reads_the_test_hub(hub, domains, tmp_path):
    """``huggingface_hub`` against the server, as against the Hub: the tree listed in pages, a file downloaded
    (its commit and sha256 as the server says), and ranges read through ``HfFileSystem``."""
    pytest.importorskip("huggingface_hub")
    script = f"""
import json, sys
from huggingface_hub import HfApi, HfFileSystem, hf_hub_download
api = HfApi()
tree = [(f.path, getattr(f, "size", None)) for f in api.list_repo_tree({REPO!r}, repo_type="dataset", recursive=True)]
path = hf_hub_download({REPO!r}, "data/mdcath_dataset_{DOMAINS[1]}.h5", repo_type="dataset", cache_dir=sys.argv[1])
fs = HfFileSystem()
with fs.open("datasets/{REPO}@main/data/mdcath_dataset_{DOMAINS[2]}.h5", "rb", block_size=4096) as f:
    f.seek(100_000)
    middle = f.read(5000)
    head = fs.read_block("datasets/{REPO}/data/mdcath_dataset_{DOMAINS[0]}.h5", 10, 90)
info = api.dataset_info({REPO!r}, revision="main")
print(json.dumps({{"tree": tree, "path": path, "middle": middle.hex(), "head": head.hex(), "sha": info.sha}}))
"""
    got = subprocess.run([sys.executable, "-c", script, str(tmp_path / "cache")], capture_output=True, text=True,
                         timeout=120, env={**os.environ, **hub.env()})
    assert got.returncode == 0, got.stderr[-3000:]
    said = json.loads(got.stdout.strip().splitlines()[-1])
    files = sorted(domains.iterdir())
    want = [("README.md", 28), ("data", None)] + [(f"data/{p.name}", p.stat().st_size) for p in files]
    assert [(p, s if p != "data" else None) for p, s in said["tree"]] == want
    assert hub.requests >= 3   # (5 entries, 2 a page: three pages)
    assert Path(said["path"]).read_bytes() == files[1].read_bytes()
    assert said["sha"] == hub.repos[("datasets", REPO)].refs["main"]
    assert f"/snapshots/{said['sha']}/" in said["path"]
    assert bytes.fromhex(said["middle"]) == files[2].read_bytes()[100_000:105_000]
    assert bytes.fromhex(said["head"]) == files[0].read_bytes()[10:100]


def test_a_glob_over_a_repository_lists_its_tree_at_one_commit(hub, domains):
    """The tree asked for recursively, page after page; the matches named at the commit ``main`` is at."""
    from trajscale.storage.hub import pin_revisions
    from trajscale.storage.location import Location

    pin_revisions()
    sha = hub.repos[("datasets", REPO)].refs["main"]
    before = hub.requests
    found = Location.glob(GLOB, {"endpoint_url": hub.endpoint})
    assert [m.where for m in found] == [f"hf://datasets/{REPO}@{sha}/data/mdcath_dataset_{d}.h5" for d in DOMAINS]
    assert hub.requests - before == 1 + 2   # the revision, then the tree: 4 entries below data/, 2 a page
    assert found[1].read() == (domains / f"mdcath_dataset_{DOMAINS[1]}.h5").read_bytes()


@pytest.mark.parametrize("executor", ["serial", pytest.param("processes", marks=pytest.mark.cli)])
def test_a_run_over_the_hub_gives_the_local_runs_bytes(hub, domains, local_result, tmp_path, executor):
    """``trajscale run ramachandran --ensemble "hf://.../mdcath_dataset_*.h5"``: the local run's output, byte for
    byte; the report names the commit; each file's resolve URL asked at most twice (the preparation's and a
    worker's), whatever the number of ranges, which go straight to the storage."""
    more = ("--executor", "processes", "-n", "2") if executor == "processes" else ()
    sha = hub.repos[("datasets", REPO)].refs["main"]
    out, report = tmp_path / "hub.parquet", tmp_path / "report.json"
    got = ramachandran(GLOB, out, "--report", str(report), *more, env={**os.environ, **hub.env()},
                       here=executor == "serial")
    assert got.returncode == 0, got.stderr
    assert out.read_bytes() == local_result
    assert json.loads(report.read_text())["ensemble"]["revisions"] == {f"hf://datasets/{REPO}@main": sha}
    resolves = {k: v for k, v in hub.resolves.items() if k.endswith(".h5")}
    assert sorted(resolves) == [f"{REPO}/data/mdcath_dataset_{d}.h5" for d in DOMAINS]
    assert max(resolves.values()) <= 2, resolves
    assert hub.ranges > 3 * sum(resolves.values()), (hub.ranges, resolves)
    if executor == "serial":
        # listing the members, then preparing them: each file's metadata read once
        twice = [r for r, n in collections.Counter(hub.range_log).items() if n > 1]
        assert twice == [], twice
        # and no request but its resolve and its ranges a file: its size and identity come with its first range
        assert hub.requests == 1 + 2 + len(DOMAINS) + hub.ranges   # (the revision; the tree, 2 entries a page)


def test_a_gated_repository_wants_a_token_and_never_shows_it(hub, domains, local_result, tmp_path):
    """Without a token: one line naming the repository and how to give one. With ``HF_TOKEN``, or
    ``--storage-option token=...``: the run; the token is nowhere in what it prints (``-v``) or writes, nor sent
    to the storage."""
    gated = "compsciencelab/mdcath-gated"
    publish(hub, domains, gated, gated=True)
    where = f"hf://datasets/{gated}/data/mdcath_dataset_*.h5"
    refused = ramachandran(where, tmp_path / "no.parquet", env={**os.environ, **hub.env()})
    assert refused.returncode != 0
    said = refused.stderr.strip()
    assert "\n" not in said and "Traceback" not in said, said
    assert f"hf://datasets/{gated}" in said and "HF_TOKEN" in said, said
    for way, more, env in (("option", ("--storage-option", f"token={TOKEN}"), {}), ("env", (), {"HF_TOKEN": TOKEN})):
        out, report, results = tmp_path / f"{way}.parquet", tmp_path / f"{way}.json", tmp_path / f"{way}-results"
        got = ramachandran(where, out, "--report", str(report), "--results", str(results), "-v", *more,
                           env={**os.environ, **hub.env(**env)})
        assert got.returncode == 0, got.stderr
        assert out.read_bytes() == local_result
        written = [p.read_bytes() for p in (report, *results.rglob("*")) if p.is_file()]
        for text in (got.stdout.encode(), got.stderr.encode(), *written):
            assert TOKEN.encode() not in text and b"sig=" not in text   # (nor the storage's signed URLs)
    assert hub.authorizations == []   # (the storage's signed URLs need none: the token stays with the Hub)


def test_throttled_every_fifth_request_the_run_completes_the_same(domains, local_result, tmp_path):
    """``429`` with ``Retry-After: 1`` on every 5th request, of the Hub and its storage: waited out."""
    with HubServer(throttle_every=5, retry_after=1) as hub:
        publish(hub, domains)
        out = tmp_path / "throttled.parquet"
        got = ramachandran(GLOB, out, env={**os.environ, **hub.env()})
        assert got.returncode == 0, got.stderr
        assert hub.throttled >= 2, hub.throttled
    assert out.read_bytes() == local_result


@pytest.mark.cli
def test_a_hub_that_stops_answering_during_the_listing_ends_the_run(domains, tmp_path):
    """The Hub answers the revision and the tree's first page, then nothing: the run ends as any frozen server's,
    on its server's clock (exit status 9, one line naming the repository), not on a clock of the Hub's own."""
    import time

    with HubServer(page=1, freeze_after=2) as hub:
        publish(hub, domains)
        t0 = time.monotonic()
        got = ramachandran(GLOB, tmp_path / "frozen.parquet", "--storage-option", "retry_seconds=2",
                           "--storage-option", "timeout=1", env={**os.environ, **hub.env()}, here=False)
        took = time.monotonic() - t0
        asked = hub.requests
    said = got.stderr.strip()
    assert got.returncode == 9, said
    assert "\n" not in said and "Traceback" not in said, said
    assert f"hf://datasets/{REPO}: did not answer in 2 s" in said, said
    assert asked >= 4 and took < 15, (asked, took)   # (the second page asked again, and given up on in time)


def test_a_branch_moved_before_a_resume_is_said_and_the_runs_commit_read(hub, domains, local_result, tmp_path):
    """``--resume`` after ``main`` moved: one line says so, and the commit the run began with is read again."""
    results = tmp_path / "results"
    first = ramachandran(GLOB, tmp_path / "first.parquet", "--results", str(results),
                         env={**os.environ, **hub.env()})
    assert first.returncode == 0, first.stderr
    began = hub.repos[("datasets", REPO)].refs["main"]
    moved = hub.commit(REPO, {f"data/mdcath_dataset_{DOMAINS[0]}.h5": domains / f"mdcath_dataset_{DOMAINS[1]}.h5",
                              "data/mdcath_dataset_9xyzA00.h5": domains / f"mdcath_dataset_{DOMAINS[2]}.h5"})
    again = ramachandran(GLOB, tmp_path / "again.parquet", "--results", str(results), "--resume",
                         env={**os.environ, **hub.env()})
    assert again.returncode == 0, again.stderr
    lines = [line for line in again.stderr.splitlines() if "moved" in line]
    assert len(lines) == 1 and began[:12] in lines[0] and moved[:12] in lines[0], again.stderr
    assert (tmp_path / "again.parquet").read_bytes() == local_result


@pytest.mark.cli
@pytest.mark.slow
def test_the_ensembles_pages_hub_example_runs(domains, tmp_path):
    """docs/ensembles.md's "mdCATH from the Hub" runs as written with ``HF_ENDPOINT`` at the suite's Hub (the
    domains published as ``compsciencelab/mdCATH``): the commit named, the second epoch without a request."""
    pytest.importorskip("deeptime")
    pytest.importorskip("torch")
    import re

    from tests.conftest import ROOT

    page = (ROOT / "docs" / "ensembles.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "hf://datasets/" in b)
    with HubServer() as hub:
        sha = publish(hub, domains, "compsciencelab/mdCATH")
        got = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={**os.environ, **hub.env()})
    assert got.returncode == 0, got.stderr[-3000:]
    frames = 3 * (4 + 3 + 5) + 3   # (the domains' members: 4 + i, 3 and 5 frames)
    assert f"read at {{'hf://datasets/compsciencelab/mdCATH@main': '{sha}'}}" in got.stdout, got.stdout
    assert f"epoch 0: {frames} frames" in got.stdout and f"epoch 1: {frames} frames, 0 requests" in got.stdout, \
        got.stdout
    assert json.loads((tmp_path / "rama-hub" / "ensemble.json").read_text())["revisions"] == \
        {"hf://datasets/compsciencelab/mdCATH@main": sha}


@pytest.mark.mpi
def test_two_mpi_ranks_over_the_hub_give_the_local_runs_bytes(hub, domains, local_result, tmp_path):
    """``mpiexec -n 2 ... --executor mpi``: every rank reads the glob's files at the commit rank 0 listed them
    at; the local run's bytes; each file's resolve URL asked at most twice."""
    from tests.conftest import run_mpi

    out = tmp_path / "mpi.parquet"
    got = run_mpi(2, ["-m", "trajscale.cli.main", "run", "ramachandran", "--ensemble", GLOB, "--sincos", "--out",
                      str(out), "--executor", "mpi"], cwd=tmp_path, env=hub.env())
    assert got.returncode == 0, got.stderr + got.stdout
    assert out.read_bytes() == local_result
    resolves = {k: v for k, v in hub.resolves.items() if k.endswith(".h5")}
    assert len(resolves) == len(DOMAINS) and max(resolves.values()) <= 2, resolves


def test_an_expired_storage_url_is_resolved_again_once(domains):
    """The storage's signed URL kept for a file expires (the storage answers 403): the file's resolve URL is
    asked again, once, and the read goes on with the right bytes; every request names trajscale."""
    from trajscale.storage.location import Location

    data = (domains / f"mdcath_dataset_{DOMAINS[0]}.h5").read_bytes()
    with HubServer() as hub:
        sha = publish(hub, domains, "org/expiring")
        store = Location(f"hf://datasets/org/expiring@{sha}/data/mdcath_dataset_{DOMAINS[0]}.h5",
                         {"endpoint_url": hub.endpoint}).store()
        ranges = [(a, a + 3000) for a in range(300_000, len(data) - 3000, 50_000)]
        assert [bytes(g) for g in store.read_ranges(ranges[:5])] == [data[a:b] for a, b in ranges[:5]]
        assert sum(hub.resolves.values()) == 1
        hub.ahead += 2 * hub.ttl   # the URL signed for the file has expired
        assert [bytes(g) for g in store.read_ranges(ranges[5:])] == [data[a:b] for a, b in ranges[5:]]
        assert sum(hub.resolves.values()) == 2, hub.resolves
        assert store.stats.retries == 0
        assert set(hub.agents) and all(a.startswith("trajscale/") for a in hub.agents), hub.agents


@pytest.mark.cli
def test_any_url_that_redirects_is_asked_where_once_a_file(domains):
    """A plain http URL that redirects (a Hub's resolve URL, to its signed storage): the redirect asked once,
    whatever the number of ranges, which go straight to the storage; another process handed the object's state
    asks nothing; once the storage refuses the kept URL (expired), the URL is asked again, once. A server seen
    answering in place is asked nothing more."""

    from trajscale.storage.location import Location

    data = (domains / f"mdcath_dataset_{DOMAINS[0]}.h5").read_bytes()
    ranges = [(a, a + 3000) for a in range(300_000, len(data) - 3000, 50_000)]
    with HubServer() as hub:
        sha = publish(hub, domains, "org/plain")
        url = f"{hub.endpoint}/datasets/org/plain/resolve/{sha}/data/mdcath_dataset_{DOMAINS[0]}.h5"
        store = Location(url).store()
        assert [bytes(g) for g in store.read_ranges(ranges[:5])] == [data[a:b] for a, b in ranges[:5]]
        assert sum(hub.resolves.values()) == 1 and hub.ranges == 6   # (the first bytes, then the five)
        state = store.state()
        script = ("import json, sys; from trajscale.storage.location import Location; s = json.loads(sys.argv[1]); "
                  "o = Location(sys.argv[2], s['storage_options']).store(s['identity']); "
                  "print(o.read_ranges([(300_000, 303_000)])[0].hex())")
        got = subprocess.run([sys.executable, "-c", script, json.dumps(state), url], capture_output=True,
                             text=True, timeout=120)
        assert got.returncode == 0 and bytes.fromhex(got.stdout.strip()) == data[300_000:303_000], got.stderr
        assert sum(hub.resolves.values()) == 1 and hub.ranges == 7
        hub.ahead += 2 * hub.ttl   # the kept URL has expired
        assert [bytes(g) for g in store.read_ranges(ranges[5:])] == [data[a:b] for a, b in ranges[5:]]
        assert sum(hub.resolves.values()) == 2, hub.resolves
        assert store.stats.retries == 0
        # a file the server answers in place (the Hub's small ones): asked, then its server's next file is not
        later = hub.commit("org/plain", {"NOTES.md": b"notes\n"})
        for name, asked in (("README.md", 2), ("NOTES.md", 1)):
            small = Location(f"{hub.endpoint}/datasets/org/plain/resolve/{later}/{name}").store()
            assert small.read_ranges([(0, 5)])[0] == (b"# mdC" if name == "README.md" else b"notes")
            assert hub.resolves[f"org/plain/{name}"] == asked, hub.resolves
        from trajscale.storage import redirects

        assert redirects._RESOLVING == {}   # (a file's ask lock lives while it is asked, not for the process)


@pytest.mark.parametrize("url, said", [
    ("hf://datasets/org", "give hf://datasets/ORG/NAME/PATH"),
    ("hf://datasets/org/@main/x.h5", "give hf://datasets/ORG/NAME/PATH"),
    ("hf://datasets/org/name/", "a folder, not an object"),
])
def test_a_malformed_hub_url_is_one_line(url, said):
    from trajscale.errors import TrajscaleError
    from trajscale.storage.location import Location

    with pytest.raises(TrajscaleError) as err:
        Location(url, {"endpoint_url": "http://127.0.0.1:9"}).store()
    assert said in str(err.value) and "\n" not in str(err.value), err.value


def test_a_repository_or_revision_that_is_not_there_is_one_line(hub):
    from trajscale.errors import TrajscaleError
    from trajscale.storage.location import Location

    options = {"endpoint_url": hub.endpoint, "retry_seconds": 2}
    for pattern, said in ((f"hf://datasets/{REPO}-none/data/*.h5", "no such repository"),
                          (f"hf://datasets/{REPO}@v9/data/*.h5", "no such revision")):
        with pytest.raises(TrajscaleError) as err:
            Location.glob(pattern, options)
        assert said in str(err.value) and "\n" not in str(err.value), err.value
    assert Location.glob(f"hf://datasets/{REPO}/nothing/*.h5", options) == []


def _epoch(cache: Path) -> tuple:
    """An epoch over the glob with ``cache_dir``, as a new process reads it (nothing resolved nor kept before):
    the dataset's member names, every sample, and the members it refused."""
    import numpy as np

    from trajscale.ml import EnsembleDataset
    from trajscale.storage.hub import pin_revisions
    from trajscale.storage.objects import forget_heads

    pin_revisions()
    forget_heads()
    data = EnsembleDataset(GLOB, fields=("position", "force"), cache_dir=cache)
    try:
        return data.names, data.read(np.arange(len(data))), data.refused
    finally:
        data.close()


@pytest.fixture
def offline(hub, tmp_path, monkeypatch) -> tuple[Path, tuple]:
    """The node-local cache an epoch online filled (and what it read), then ``HF_HUB_OFFLINE=1``."""
    for k, v in hub.env().items():
        monkeypatch.setenv(k, v)
    online = _epoch(tmp_path / "cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "cache", online


def test_offline_an_epoch_reads_the_node_local_cache_the_hub_unasked(hub, offline, caplog):
    """An epoch with ``cache_dir`` online, then the same with ``HF_HUB_OFFLINE=1``: the same members and samples,
    from the copies and the record kept beside them, the commit said once, and no request at the Hub or its
    storage."""
    import logging

    import numpy as np

    cache, (names, want, _) = offline
    before = hub.requests
    with caplog.at_level(logging.WARNING, logger="trajscale.storage.hub"):
        got_names, got, refused = _epoch(cache)
    assert hub.requests == before
    assert len(names) == 9 and got_names == names and refused == [] and sorted(got) == sorted(want)
    for k in want:
        assert np.array_equal(got[k], want[k]), k
    said = [r.getMessage() for r in caplog.records]
    sha = hub.repos[("datasets", REPO)].refs["main"]
    assert len(said) == 1 and f"hf://datasets/{REPO}@main: HF_HUB_OFFLINE is set: read at {sha[:12]}" in said[0]


@pytest.mark.cli
def test_offline_a_run_on_two_processes_gives_the_local_runs_bytes(hub, offline, local_result, tmp_path):
    """``trajscale run ... --storage-option cache_dir=DIR`` with ``HF_HUB_OFFLINE=1`` on two worker processes,
    over the copies an epoch made: the local run's output, byte for byte, and no request."""
    before = hub.requests
    out = tmp_path / "offline.parquet"
    got = ramachandran(GLOB, out, "--executor", "processes", "-n", "2", "--storage-option", f"cache_dir={offline[0]}",
                       env=dict(os.environ), here=False)
    assert got.returncode == 0, got.stderr
    assert out.read_bytes() == local_result
    assert hub.requests == before


def test_offline_what_the_cache_lacks_is_refused_in_one_line(hub, offline):
    """A copy the cache does not hold: its members refused, by the dataset and by a run, in one line naming the
    file, the others read. A revision never resolved, or no cache named: one line. Not one request."""
    import trajscale as ts
    from trajscale.errors import TrajscaleError
    from trajscale.storage.location import Location

    cache = offline[0]
    sha = hub.repos[("datasets", REPO)].refs["main"]
    lacking = f"hf://datasets/{REPO}@{sha}/data/mdcath_dataset_{DOMAINS[2]}.h5"
    for copy in cache.glob(f"mdcath_dataset_{DOMAINS[2]}-*.h5"):
        copy.unlink()
    before = hub.requests
    why = f"{lacking}: the Hub is offline (HF_HUB_OFFLINE) and the file is not in the cache {cache}"
    names, _, refused = _epoch(cache)
    assert [r.member.name for r in refused] == [f"{DOMAINS[2]}/{t}/{r}" for t, r in ((320, 0), (348, 0), (348, 1))]
    assert {r.reason for r in refused} == {why} and len(names) == 6
    run = ts.run(ts.Ramachandran(select="protein", sincos=True), GLOB, storage_options={"cache_dir": str(cache)})
    assert {r.reason for r in run.refused} == {why} and len(run.refused) == 3 and len(run.members) == 6
    for where, options, said in (
            (f"hf://datasets/{REPO}@v2/data/*.h5", {"cache_dir": str(cache)},
             f"hf://datasets/{REPO}@v2: the Hub is offline (HF_HUB_OFFLINE) and revision v2 is not in the cache"),
            (f"hf://datasets/{REPO}@{sha}/nothing/*.h5", {"cache_dir": str(cache)},
             "the Hub is offline (HF_HUB_OFFLINE) and the listing of nothing/ is not in the cache"),
            (GLOB, {}, f"hf://datasets/{REPO}: HF_HUB_OFFLINE is set: the Hub is not asked, and no cache_dir")):
        with pytest.raises(TrajscaleError) as err:
            Location.glob(where, options)
        assert said in str(err.value) and "\n" not in str(err.value), err.value
    assert hub.requests == before



def test_offline_a_damaged_record_is_one_line_naming_it(hub, offline):
    """The record steers what is read: every field of each entry is checked, and a damaged one refused in one
    line naming it, by the read that needs it (a revision, a listing, a file's identity)."""
    from trajscale.errors import TrajscaleError
    from trajscale.storage.hub import pin_revisions
    from trajscale.storage.location import Location

    options = {"cache_dir": str(offline[0])}
    (folder,) = offline[0].glob(".hf-*")
    member = f"hf://datasets/{REPO}@main/data/mdcath_dataset_{DOMAINS[0]}.h5"
    entry = {part: next(p for p in sorted(folder.glob(f"{part}-*.json"))
                        if json.loads(p.read_text())["key"].endswith(f"{DOMAINS[0]}.h5") or part != "files")
             for part in ("revisions", "trees", "files")}
    reads = {"revisions": lambda: Location.glob(GLOB, options), "trees": lambda: Location.glob(GLOB, options),
             "files": lambda: Location(member, options).store()}
    bad = {"revisions": '"../../x"', "trees": '"data/x.h5"', "files": '["e", -1]'}
    for part, path in entry.items():
        kept = path.read_text()
        key = json.loads(kept)["key"]
        for text in ("{not json", "[]", json.dumps({"key": key + "x", "value": json.loads(kept)["value"]}),
                     f'{{"key": {json.dumps(key)}, "value": {bad[part]}}}'):
            path.write_text(text)
            pin_revisions()
            with pytest.raises(TrajscaleError) as err:
                reads[part]()
            assert str(err.value).startswith(f"{path}: ") and "delete it" in str(err.value), err.value
            assert "\n" not in str(err.value), err.value
        path.write_text(kept)
    pin_revisions()
    assert len(Location.glob(GLOB, options)) == 3


def _written() -> int:
    """Bytes this process has handed to write(2) so far (Linux's count)."""
    return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["wchar"])


def test_keeping_a_files_identity_costs_the_same_however_many_are_kept(tmp_path):
    """Keeping the 200th file's size and ETag writes as many bytes as keeping the 1st (counted by the kernel): a
    repository of thousands of files costs linear bytes, not quadratic; each is read back offline."""
    from trajscale.storage.hub import HubPath, record, recorded

    hp, sha = HubPath.of(f"hf://datasets/{REPO}@main/data/x.h5"), "0" * 40
    options = {"cache_dir": str(tmp_path), "endpoint_url": "http://127.0.0.1:9"}
    spent = []
    for batch in range(2):
        before = _written()
        for i in range(batch * 100, batch * 100 + 100):
            record(hp, options, "files", f"{sha}/data/mdcath_dataset_{i:05d}.h5", [f'"etag-{i}"', 10**9 + i])
        spent.append(_written() - before)
    assert all(0 < n < 100 * 256 for n in spent) and spent[1] < 1.2 * spent[0], spent
    for i in range(200):
        key = f"{sha}/data/mdcath_dataset_{i:05d}.h5"
        assert recorded(hp, options, "files", key, "the file") == [f'"etag-{i}"', 10**9 + i]


@pytest.mark.cli
def test_two_processes_recording_at_once_lose_nothing(tmp_path):
    """Two processes keep 150 files' identities each into one record at once (and the same revision, each its
    own commit): every identity is read back, the revision is one of the two, no temporary is left."""
    from trajscale.storage.hub import HubPath, recorded

    script = f"""if True:
        import os, sys, time
        from trajscale.storage.hub import HubPath, record
        hp, options = HubPath.of("hf://datasets/{REPO}/x"), {{"cache_dir": sys.argv[1], "endpoint_url": "http://h"}}
        while not os.path.exists(sys.argv[3]):
            time.sleep(0.001)
        for i in range(150):
            record(hp, options, "files", f"{{'0' * 40}}/{{sys.argv[2]}}/{{i}}.h5", [sys.argv[2], i])
            record(hp, options, "revisions", "main", sys.argv[2] * 40)
    """
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "cache"), who, str(go)])
             for who in "ab"]
    go.touch()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    hp, options = HubPath.of(f"hf://datasets/{REPO}/x"), {"cache_dir": str(tmp_path / "cache"), "endpoint_url": "http://h"}
    for who in "ab":
        for i in range(150):
            assert recorded(hp, options, "files", f"{'0' * 40}/{who}/{i}.h5", "the file") == [who, i]
    assert recorded(hp, options, "revisions", "main", "main") in ("a" * 40, "b" * 40)
    (folder,) = (tmp_path / "cache").iterdir()
    assert len(list(folder.iterdir())) == 301, sorted(folder.iterdir())[:5]


def test_offline_a_packed_store_is_read_from_the_node_local_cache(tmp_path, monkeypatch):
    """``H5Dataset`` over a store on the Hub with ``cache_dir``: online it keeps the copy and the record; with
    ``HF_HUB_OFFLINE=1`` a new dataset reads both, the same samples as the file's, not one request."""
    import numpy as np

    from tests.ml.conftest import write_npz_set
    from trajscale.ml import H5Dataset
    from trajscale.ml.pack import pack
    from trajscale.storage.hub import pin_revisions
    from trajscale.storage.objects import forget_heads

    paths, _ = write_npz_set(tmp_path)
    pack(paths, tmp_path / "store.h5")
    want = H5Dataset(tmp_path / "store.h5").read(np.arange(240))
    url, cache = f"hf://datasets/{REPO}@main/packed/store.h5", tmp_path / "node"
    with HubServer() as hub:
        hub.commit(REPO, {"packed/store.h5": tmp_path / "store.h5"})
        for k, v in hub.env().items():
            monkeypatch.setenv(k, v)
        for offline in (False, True):
            monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
            pin_revisions()
            forget_heads()
            before = hub.requests
            data = H5Dataset(url, cache_dir=cache)
            try:
                got = data.read(np.arange(len(data)))
            finally:
                data.close()
            assert sorted(got) == sorted(want) and all(np.array_equal(got[k], want[k]) for k in want)
            assert not offline or hub.requests == before
