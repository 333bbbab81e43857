"""``inspect`` on a URL: every scheme the store layer serves is taken as a URL (never as a local path), and
the store's validator (what tells the object from a replacement) is printed, with a warning where a
replacement may go unseen."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.conftest import run_cli_here

from .conftest import BUCKET, TPR, XTC

pytestmark = pytest.mark.remote


@pytest.mark.parametrize("url", ["gs://bucket/adk.h5md", "gcs://bucket/adk.xtc", "az://box/adk.h5md",
                                 "abfs://box/adk.xtc", "abfss://box/adk.h5md"])
def test_every_scheme_the_stores_serve_is_a_url_not_a_local_path(url, tmp_path):
    # a closed port: the one line names the URL's store, not a local file of that name
    proc = run_cli_here("inspect", url, "--storage-option", "endpoint_url=http://127.0.0.1:9", "--storage-option",
                        "retry_seconds=0", "--storage-option", "anon=true", cwd=tmp_path)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert url.split("/")[2] in lines[0] and "no such file" not in lines[0], lines[0]


def test_inspect_names_an_nginx_objects_validator_and_warns(nginx, tmp_path):
    folder = nginx.root / "validator"
    folder.mkdir(exist_ok=True)
    shutil.copy(XTC, folder / "adk.xtc")
    st = os.stat(folder / "adk.xtc")
    etag = f'"{int(st.st_mtime):x}-{st.st_size:x}"'   # nginx's ETag: modification time in seconds and size
    url = nginx.url("validator/adk.xtc")
    shown = run_cli_here("inspect", url, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    v = json.loads(shown.stdout)["validator"]
    assert v["kind"] == "mtime-etag" and v["complete"] is False and etag in v["says"], v
    text = run_cli_here("inspect", url, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert f"validator     {v['says']}" in text.stdout
    assert "a replacement of this object may go unseen" in text.stdout


def test_inspect_names_an_s3_objects_etag(s3_server, adk_stores, tmp_path):
    _, url, _ = adk_stores["gzip"]
    etag = s3_server.client().head_object(Bucket=BUCKET, Key=url.split("/", 3)[3])["ETag"]
    shown = run_cli_here("inspect", url, "--json", env=s3_server.subprocess_env(), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    v = json.loads(shown.stdout)["validator"]
    assert v["kind"] == "etag" and v["complete"] is True and etag in v["says"], v
    text = run_cli_here("inspect", url, env=s3_server.subprocess_env(), cwd=tmp_path)
    assert f"validator     {v['says']}" in text.stdout and "may go unseen" not in text.stdout


def test_a_local_file_has_no_validator_line(tmp_path):
    shown = run_cli_here("inspect", XTC, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "validator" not in json.loads(shown.stdout)


def test_a_run_report_names_the_objects_validator(nginx, s3_env, adk_stores):
    """The run report says what would have shown the object replaced: nginx's modification-second ETag with
    its warning, S3's content ETag without (in the report's JSON facts and in its summary)."""
    import trajscale as ts
    from trajscale.report.summary import run_summary

    folder = nginx.root / "validator-run"
    folder.mkdir(exist_ok=True)
    shutil.copy(XTC, folder / "adk.xtc")
    st = os.stat(folder / "adk.xtc")
    r = ts.run(ts.RMSD(select="name CA"), TPR, nginx.url("validator-run/adk.xtc"), executor="serial")
    said = r.report.to_dict()["source"]
    assert f'"{int(st.st_mtime):x}-{st.st_size:x}"' in said["validator"] and said["validator_complete"] is False
    assert f"validator {said['validator']} (a replacement may go unseen)" in run_summary(r.report)

    _, url, _ = adk_stores["gzip"]
    etag = s3_env.client().head_object(Bucket=BUCKET, Key=url.split("/", 3)[3])["ETag"]
    r = ts.run(ts.RMSD(select="name CA"), TPR, url, executor="serial")
    assert etag in r.report.source.validator and r.report.source.validator_complete is True
    assert "may go unseen" not in run_summary(r.report)
