"""The location layer answers what the Sources used to ask of a URL: where a file an index names lies, what a
location's identity is now, and which store (and which worker modules) its bytes need. Checked against the
standard library's own answers (``urllib.parse.urljoin``, ``os.path``, ``os.stat``), with no server: nothing
here opens an object."""

from __future__ import annotations

import json
import os
from urllib.parse import urljoin

import pytest

from trajscale.sources import SegmentedSource, reader_modules
from trajscale.storage.location import Location


@pytest.mark.parametrize("index, part", [
    ("https://host/data/run/index.json", "part_000.h5md"),
    ("https://host/data/run/index.json", "../other/part_001.xtc"),
    ("https://host/data/run/index.json", "./sub/./p.h5md"),
    ("http://127.0.0.1:18080/a/index.json", "b/c/p.xtc"),
])
def test_a_part_beside_an_index_behind_a_url_is_where_a_browser_would_look(index, part):
    assert Location(index).beside(part).where == urljoin(index, part)


def test_a_part_beside_an_object_in_a_bucket_stays_in_it():
    # (urljoin knows no s3:, so the same joins are checked on the path as an http URL's)
    for part in ("p.h5md", "../x/p.h5md", "sub/p.xtc"):
        as_http = urljoin("http://bucket/run/v1/index.json", part)
        assert Location("s3://bucket/run/v1/index.json").beside(part).where == as_http.replace("http://", "s3://", 1)


def test_a_part_beside_a_local_index_is_in_its_folder(tmp_path):
    index = str(tmp_path / "run" / "index.json")
    assert Location(index).beside("p.h5md").where == os.path.join(os.path.dirname(index), "p.h5md")
    # an absolute path and a URL are taken as they are, beside a local index and an object alike
    for index in (str(tmp_path / "index.json"), "s3://b/run/index.json"):
        assert Location(index).beside("/abs/p.xtc").where == "/abs/p.xtc"
        assert Location(index).beside("https://h/p.h5md").where == "https://h/p.h5md"


def test_a_topology_an_index_names_is_a_local_file(tmp_path):
    def topology_of(named: str) -> str:
        index = {"format": "trajscale-segments", "n_atoms": 3, "topology": named,
                 "segments": [{"path": "p.xtc", "start": 0, "n_frames": 1, "format": "XTC"}]}
        (tmp_path / "index.json").write_text(json.dumps(index))
        return SegmentedSource(str(tmp_path / "index.json")).topology   # (no part opened)

    assert topology_of("top.tpr") == os.path.join(str(tmp_path), "top.tpr")
    assert topology_of("/abs/top.tpr") == "/abs/top.tpr"


def test_a_local_files_identity_is_its_stat_and_none_when_it_is_gone(tmp_path):
    f = tmp_path / "p.xtc"
    f.write_bytes(b"12345")
    st = os.stat(f)
    assert Location(f).identity == (st.st_dev, st.st_ino, 5, st.st_mtime_ns)
    assert Location(tmp_path).identity is None   # a folder is no part
    f.unlink()
    assert Location(f).identity is None


def test_the_store_says_what_a_worker_preloads():
    from trajscale.storage.objects import RemoteObject

    assert Location("/data/run.h5md").worker_modules(("x",)) == ()   # (a local read starts no client)
    for url in ("s3://b/run.h5md", "https://h/run.xtc", "gs://b/k", "az://c/k"):
        assert Location(url).worker_modules(("x",)) == (*RemoteObject.worker_modules, "x")
    # a local file: its format's Source module, nothing of another format
    assert reader_modules("/data/run.h5md") == ("trajscale.h5md.source",)
    assert not {m for m in reader_modules("/data/run.xtc") if "h5md" in m}
    got = reader_modules(["s3://b/run.h5md", "https://h/run.xtc"])
    assert {"obstore", "trajscale.hdf5.metadata", "trajscale.xdr.offsets", "trajscale.xdr._xdr"} <= set(got)
    # every name is a module this environment can import (what a pool's forkserver imports before its workers)
    import importlib.util

    assert all(importlib.util.find_spec(m) is not None for m in got)


@pytest.mark.parametrize("lead", ["", "\n", "  \r\n\t", "\x0c"])
def test_a_segment_index_is_told_after_any_white_space(tmp_path, lead):
    """The registry asks a Source only about files that begin as it declares: a segment index is JSON, white
    space first or not (as Python's ``bytes.lstrip`` strips it, the index's own test)."""
    import json

    from trajscale.sources import registry

    index = {"format": "trajscale-segments", "version": 1, "n_atoms": 3,
             "segments": [{"path": "p.xtc", "start": 0, "n_frames": 1}]}
    path = tmp_path / "run.idx"
    path.write_text(lead + json.dumps(index))
    assert registry.guess(Location(str(path))).format == "SEGMENTS"


def test_one_rule_makes_a_path_absolute_wherever_it_enters(tmp_path, monkeypatch):
    """A run, an ensemble's member and a conversion's task name a file by a link the same way: absolute against
    the working folder, the link kept (``os.path.abspath``, the standard library's own rule), so a member and
    a run of the same file are the same name."""
    from trajscale.convert.pool import _absolute
    from trajscale.ensemble import Member
    from trajscale.sources import locate
    from trajscale.storage.location import Location

    real = tmp_path / "store" / "a1b2c3.xtc"
    real.parent.mkdir()
    real.write_bytes(b"")
    (tmp_path / "run.xtc").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    expected = os.path.abspath("run.xtc")
    assert locate("run.xtc") == expected
    assert Member("m", ("run.xtc",), "top.pdb").trajectory == (expected,)
    assert Member("m", ("run.xtc",), "top.pdb").topology == os.path.abspath("top.pdb")
    assert _absolute("run.xtc") == expected
    assert Location("run.xtc").absolute().where == expected
    for url in ("s3://b/run.xtc", "https://h/run.xtc", "gs://b/k", "az://c/k"):
        assert locate(url) == url and _absolute(url) == url


def test_a_glob_over_a_web_server_is_refused_in_one_line():
    from trajscale.ensemble import Ensemble
    from trajscale.errors import ConfigError
    from trajscale.storage.location import Location

    for call in (lambda: Location.glob("https://host/runs/*.xtc"), lambda: Ensemble.from_glob("http://h/r/*.xtc"),
                 lambda: Location("https://host/runs").list("*.xtc")):
        with pytest.raises(ConfigError, match="no listing") as err:
            call()
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="give s3://BUCKET/PREFIX/PATTERN"):
        Location.glob("s3://*/runs/*.xtc")


def test_a_location_never_shows_its_options_values():
    from trajscale.storage.location import Location

    where = Location("s3://b/k.xtc", {"key": "AKIAEXAMPLE", "secret": "do-not-print"})
    assert "do-not-print" not in repr(where) and "AKIAEXAMPLE" not in repr(where)
    assert "key, secret" in repr(where) and str(where) == "s3://b/k.xtc"
    assert where == Location("s3://b/k.xtc", {"key": "AKIAEXAMPLE", "secret": "do-not-print"})
    assert hash(where) == hash(Location("s3://b/k.xtc"))
    assert where.beside("p.h5md") == Location("s3://b/p.h5md", dict(where.options))   # read with the same options


def test_what_is_shown_of_a_location_hides_passwords_and_secret_options():
    from trajscale.storage import endpoint_of, redacted
    from trajscale.storage.location import Location

    text = "https://reader:pa:ss@host:8443/a.xtc: 401; see http://u:p@h/b?X-Amz-Signature=abc&X-Amz-Date=1&sv=2"
    assert redacted(text) == ("https://reader:***@host:8443/a.xtc: 401; see http://u:***@h/b?X-Amz-Signature=***"
                              "&X-Amz-Date=1&sv=2")
    for kept in ("https://reader@host/a.xtc", "abfs://container@account.dfs.core.windows.net/a.xtc",
                 "http://host:8080/a.xtc, mail me@host", "s3://b/k.xtc?versionId=3"):
        assert redacted(kept) == kept   # a user alone, an Azure container and a port are no secrets
    options = {"account_key": "k1", "sas_token": "k2", "secret": "k3", "token": "k4", "password": "k5",
               "endpoint_url": "http://admin:k6@minio:9000", "region_name": "eu", "keys": [1], "anon": False,
               "client_kwargs": {"aws_session_token": "k7"}}
    shown = redacted(options)
    assert not any(f"k{i}" in str(shown) for i in range(1, 8)), shown
    assert shown["endpoint_url"] == "http://admin:***@minio:9000" and shown["region_name"] == "eu"
    assert shown["keys"] == [1] and shown["anon"] is False and options["secret"] == "k3"   # (a copy shown)
    assert "k9" not in repr(Location("https://u:k9@host/a.xtc")) and endpoint_of("http://u:k9@host:80/a") == "host:80"
