"""Credentials out of sight: a password in a URL (nginx's ``/private/``, basic authentication) and a secret
storage option (the S3 server's) are used to read, and appear nowhere a run printed, logged or wrote:
single runs and ensembles with ``--out``, ``--report``, a results folder and ``refused.csv``, ``-vv``,
a pool of workers, a resumed run, ``inspect``, the error line of a failed run."""

from __future__ import annotations

import json
import shutil

import h5py
import pytest

from tests.conftest import run_cli, run_cli_here

from .conftest import BUCKET, TPR, XTC
from .servers import PRIVATE

pytestmark = pytest.mark.remote

#: What is looked for: the URL's password is this, the storage option's secret starts with it.
SECRET = PRIVATE[1]
OPTION_SECRET = f"{SECRET}-option"


@pytest.fixture
def private(nginx, s3_server, adk_stores, tmp_path):
    """(the http folder's URL with its password, the S3 options with a secret, the catalogs' folder, the S3
    URLs): AdK's XTC, its H5MD with a row past its last frame (every open warns of it, in the workers too) and a
    damaged file behind nginx's basic authentication; AdK's H5MD and a damaged object on S3."""
    folder = nginx.root / "private" / tmp_path.name
    folder.mkdir(parents=True)
    shutil.copy(XTC, folder / "adk.xtc")
    shutil.copy(adk_stores["plain"][0], folder / "extra.h5md")
    with h5py.File(folder / "extra.h5md", "a") as f:
        value = f["particles/all/position/value"]
        value.resize(value.shape[0] + 1, axis=0)
    (folder / "damaged.xtc").write_bytes(b"not a trajectory\n" * 64)
    client = s3_server.client()
    client.put_object(Bucket=BUCKET, Key=f"{tmp_path.name}/damaged.h5md", Body=b"not HDF5\n" * 64)
    base = nginx.url(f"private/{tmp_path.name}").replace("http://", f"http://{PRIVATE[0]}:{SECRET}@")
    options = ["--storage-option", f"endpoint_url={s3_server.endpoint}", "--storage-option", "key=testing",
               "--storage-option", f"secret={OPTION_SECRET}", "--storage-option", "region_name=us-east-1"]
    given = tmp_path / "given"   # the user's own files, which name the URLs: not what a run wrote
    given.mkdir()
    (given / "http.csv").write_text("name,topology,trajectory\n" + "".join(
        f"{n},{TPR},{base}/{n}\n" for n in ("adk.xtc", "extra.h5md", "damaged.xtc", "missing.xtc")))
    s3 = {"adk": adk_stores["plain"][1], "damaged": f"s3://{BUCKET}/{tmp_path.name}/damaged.h5md",
          "missing": f"s3://{BUCKET}/{tmp_path.name}/missing.h5md"}
    (given / "s3.csv").write_text("name,topology,trajectory\n" + "".join(f"{n},{TPR},{u}\n" for n, u in s3.items()))
    return base, options, given, s3


@pytest.mark.cli
@pytest.mark.slow
def test_a_password_and_a_secret_option_appear_nowhere_a_run_wrote(private, s3_server, tmp_path):
    base, options, given, s3 = private
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    # no AWS variables: the options' key and secret are what reads the bucket
    env = {k: v for k, v in s3_server.subprocess_env().items() if not k.startswith("AWS_")}
    env["TRAJSCALE_CACHE_DIR"] = str(cache)
    said = []

    def cli(*args, code=0):
        proc = run_cli(*args, cwd=work, env=env)
        said.append((args, proc))
        assert proc.returncode == code, f"{args}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    select = ["--select", "name CA", "-vv"]
    one = cli("run", "rmsd", TPR, f"{base}/adk.xtc", *select, "--out", "one.csv", "--report", "one.json")
    assert len((work / "one.csv").read_text().splitlines()) == 11   # the password read the object: 10 frames
    cli("run", "rmsd", TPR, s3["adk"], *select, *options, "--out", "one-s3.csv", "--report", "one-s3.json")
    failed = cli("run", "rmsd", TPR, f"{base}/missing.xtc", *select, code=2)
    ens = ["--executor", "processes", "-n", "2"]
    # (spawned workers: they print by Python's last resort, not the command line's logging)
    http = cli("run", "rmsd", "--ensemble", str(given / "http.csv"), *select, *ens, "--start-method", "spawn",
               "--out", "http.csv", "--results", "http-results", "--report", "http.json", code=8)
    cli("run", "rmsd", "--ensemble", str(given / "s3.csv"), *select, *ens, *options, "--out", "s3.csv",
        "--results", "s3-results", "--report", "s3.json", code=8)
    again = cli("run", "rmsd", "--ensemble", str(given / "s3.csv"), *select, *options, "--out", "s3-again.csv",
                "--results", "s3-results", "--resume", code=8)   # the folder's redacted manifest is this run's
    cli("inspect", f"{base}/adk.xtc", "-vv")
    cli("inspect", s3["adk"], "--json", *options)
    cli("inspect", f"{base}/damaged.xtc", code=2)

    for args, proc in said:
        for stream in (proc.stdout, proc.stderr):
            assert SECRET not in stream, f"{args}:\n{stream}"
    written = [p for p in (*work.rglob("*"), *cache.rglob("*")) if p.is_file()]
    assert {"one.json", "refused.csv", "ensemble.json", "http.csv", "s3-again.csv"} <= {p.name for p in written}
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    # the URL is still named, without its password
    shown = f"http://{PRIVATE[0]}:***@"
    assert failed.stderr.startswith(f"trajscale run: error: {shown}") and "missing.xtc" in failed.stderr
    refused = (work / "http-results" / "refused.csv").read_text()
    assert refused.count(shown) == 4 and "damaged" in refused and "missing" in refused   # trajectory and reason
    assert f"first: damaged.xtc: {shown}" in http.stderr and shown in one.stderr   # (-vv: the reads' log lines)
    assert f"\n{shown}" in http.stderr and "after the last complete frame" in http.stderr   # a worker's warning
    assert "nothing left to run" in again.stdout
    assert (work / "s3.csv").read_bytes() == (work / "s3-again.csv").read_bytes()


def test_a_password_in_a_url_is_what_reads_a_private_object(private, s3_server, tmp_path):
    """The password is sent (basic authentication), not only hidden: without it the server says 401."""
    base, _, _, _ = private
    bare = base.replace(f"{PRIVATE[0]}:{SECRET}@", "")
    wrong = base.replace(SECRET, "wrong")
    env = {k: v for k, v in s3_server.subprocess_env().items() if not k.startswith("AWS_")}
    for url, said in ((bare, "401"), (wrong, "401")):
        proc = run_cli_here("inspect", f"{url}/adk.xtc", env=env, cwd=tmp_path)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    proc = run_cli_here("inspect", f"{base}/adk.xtc", "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0 and '"n_frames": 10' in proc.stdout, proc.stderr
    assert f'"path": "{base.replace(SECRET, "***")}/adk.xtc"' in proc.stdout


def test_a_resumable_outputs_record_names_a_private_input_without_its_password(private):
    from trajscale.convert.resume import ResumeKey, WriteMode
    from trajscale.storage.location import Location

    base = private[0]
    key = ResumeKey.of("convert", WriteMode.SERIAL, [Location(TPR), Location(f"{base}/adk.xtc")], {})
    said = json.dumps(key.to_dict())
    assert SECRET not in said and f"{PRIVATE[0]}:***@" in said
    assert key.difference(ResumeKey.from_dict(json.loads(said))) is None   # a resume matches on what it wrote
    other = ResumeKey.of("convert", WriteMode.SERIAL, [Location(TPR), Location(f"{base}/damaged.xtc")], {})
    assert "another input" in other.difference(key)


def test_a_node_local_copy_of_a_private_object_keeps_no_password(private, tmp_path):
    from trajscale.storage.nodecache import NodeCache

    base = private[0]
    entry = NodeCache(tmp_path / "node").open(f"{base}/adk.xtc")
    with open(entry.path, "rb") as fh, open(XTC, "rb") as original:
        assert fh.read() == original.read()   # the password read it
    entry.close()
    kept = [p for p in (tmp_path / "node").rglob("*") if p.is_file()]
    assert len(kept) >= 2 and not any(SECRET.encode() in p.read_bytes() for p in kept), kept
