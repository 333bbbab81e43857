"""Every storage option is checked against the scheme's store (one line, no traceback, before any request), and
what a server shows of an object is said: its validator, an object being written, a folder's URL."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trajscale.errors import ConfigError, InputFileError

from .conftest import BUCKET, TPR

pytestmark = pytest.mark.remote


@pytest.fixture
def s3_bucket(s3_env):
    """The session's S3 server with the tests' bucket."""
    import contextlib

    with contextlib.suppress(Exception):   # made by another test already
        s3_env.client().create_bucket(Bucket=BUCKET)
    return s3_env


def _open(url, options):
    from trajscale.storage.objects import RemoteObject, forget_heads

    forget_heads()
    return RemoteObject.open(url, options)


@pytest.mark.parametrize("options, said", [
    ({"retry_seconds": "abc"}, "storage option retry_seconds: give a number of seconds, 0 or more (got 'abc')"),
    ({"timeout": "abc"}, "storage option timeout: give a number of seconds, more than 0 (got 'abc')"),
    ({"timeout": 0}, "storage option timeout: give a number of seconds, more than 0 (got 0)"),
    ({"max_concurrency": 0}, "storage option max_concurrency: give a whole number, 1 or more (got 0)"),
    ({"merge_gap": -1}, "storage option merge_gap: give a number of bytes, 0 or more (got -1)"),
    ({"anon": "maybe"}, "storage option anon: give true or false (got 'maybe')"),
])
def test_a_bad_value_is_one_line(nginx, s3_env, options, said):
    for url in (nginx.url("x.bin"), f"s3://{BUCKET}/x.bin"):
        if "anon" in options and url.startswith("http"):
            continue
        with pytest.raises(ConfigError) as err:
            _open(url, options)
        assert str(err.value) == said


def test_an_option_http_does_not_take_is_refused(nginx):
    url = nginx.url("x.bin")
    for name in ("nonsense_option", "verify", "anon", "endpoint_url"):
        with pytest.raises(ConfigError) as err:
            _open(url, {name: 1})
        text = str(err.value)
        assert text.startswith(f"{url}: storage option {name} is not one http(s) URLs take (they take ") \
            and "\n" not in text, text


def test_an_option_s3_does_not_take_is_refused(s3_env):
    with pytest.raises(ConfigError) as err:
        _open(f"s3://{BUCKET}/x.bin", {"nonsense_option": 1})
    text = str(err.value)
    assert text.startswith(f"s3://{BUCKET}: storage options not accepted (") and "nonsense_option" in text, text


@pytest.mark.cli
@pytest.mark.parametrize("option", ["retry_seconds=abc", "timeout=abc", "nonsense_option=1"])
def test_the_command_line_says_a_bad_option_in_one_line(nginx, s3_server, adk_stores, tmp_path, option):
    """From ``trajscale run``: the option's problem, one line, exit 2, no traceback (it was a traceback)."""
    (nginx.root / "adk.h5md").write_bytes(open(adk_stores["plain"][0], "rb").read())
    url = nginx.url("adk.h5md")
    out = tmp_path / "x.csv"
    proc = subprocess.run([sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", TPR, url, "--select", "name CA",
                           "--out", str(out), "--storage-option", option, "--executor", "serial"],
                          capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert option.split("=")[0] in lines[0] and not out.exists()


def test_nginx_validator_says_what_it_cannot_see(nginx):
    """nginx's ETag is the modification time in seconds and the size: the store says a same-size replacement
    within one second is not seen (the conformance suite checks it is then read whole, never mixed)."""
    (nginx.root / "v.bin").write_bytes(b"v" * 5000)
    said = _open(nginx.url("v.bin"), {}).validator
    assert said.kind == "mtime-etag" and not said.complete and "same-size" in said.says


def test_s3_validator_sees_every_replacement(s3_bucket):
    client = s3_bucket.client()
    client.put_object(Bucket=BUCKET, Key="validator/v.bin", Body=b"v" * 5000)
    said = _open(f"s3://{BUCKET}/validator/v.bin", {}).validator
    assert said.kind == "etag" and said.complete


def test_a_versioned_bucket_reads_the_version_the_run_began_with(s3_env):
    """Where the store keeps versions, reads are pinned to the first one: a replacement during the run is not
    read, and not refused either: the run's bytes stay those it began with."""
    client = s3_env.client()
    client.create_bucket(Bucket="versioned")
    client.put_bucket_versioning(Bucket="versioned", VersioningConfiguration={"Status": "Enabled"})
    old, new = bytes(range(256)) * 100, bytes(reversed(range(256))) * 100
    client.put_object(Bucket="versioned", Key="v.bin", Body=old)
    store = _open("s3://versioned/v.bin", {})
    assert store.validator.kind == "version" and store.validator.complete
    client.put_object(Bucket="versioned", Key="v.bin", Body=new)
    assert bytes(store.read_ranges([(1000, 2000)])[0]) == old[1000:2000]


def test_an_empty_object_says_what_is_seen(nginx, s3_bucket):
    """An object of 0 bytes (one being written: truncated, not yet filled): said as such, not "the object is
    empty" of an object being rewritten without more."""
    (nginx.root / "empty.bin").write_bytes(b"")
    s3_bucket.client().put_object(Bucket=BUCKET, Key="empty.bin", Body=b"")
    for url in (nginx.url("empty.bin"), f"s3://{BUCKET}/empty.bin"):
        with pytest.raises(InputFileError) as err:
            _open(url, {"retry_seconds": 1})
        text = str(err.value)
        assert text.startswith(f"{url}: the object is empty (0 bytes) now: if it is being written") and "\n" not in text


def test_a_folder_url_is_told_to_give_its_index(nginx, s3_bucket):
    (nginx.root / "run1").mkdir(exist_ok=True)
    (nginx.root / "run1" / "index.json").write_text("{}")
    s3_bucket.client().put_object(Bucket=BUCKET, Key="run1/index.json", Body=b"{}")
    for url in (nginx.url("run1"), f"s3://{BUCKET}/run1"):
        with pytest.raises(InputFileError) as err:
            _open(url, {"retry_seconds": 1})
        assert str(err.value).endswith(f"is a folder with a segment index: give {url}/index.json"), err.value
    for url in (nginx.url("run1/"), f"s3://{BUCKET}/run1/"):
        with pytest.raises(InputFileError, match="a folder, not an object: .*index.json"):
            _open(url, {})
