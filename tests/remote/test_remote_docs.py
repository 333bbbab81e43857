"""docs/remote.md's Python example runs as written against the suite's S3 server (the page's bucket,
endpoint and topology replaced by the server's and AdK's), and gives the local file's numbers."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

from .conftest import TPR

pytestmark = pytest.mark.remote

PAGE = ROOT / "docs" / "remote.md"


@pytest.mark.cli
@pytest.mark.slow
def test_the_pages_python_example_runs(s3_server, adk_stores, tmp_path):
    local, url, _ = adk_stores["plain"]
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) == 1
    code = (blocks[0].replace("s3://my-bucket/adk.h5md", url).replace('"top.tpr"', repr(TPR))
            .replace("http://127.0.0.1:9000", s3_server.endpoint))
    code += "\nimport numpy as _np\n_np.savez('left.npz', rmsd=r.rmsd, values=values)\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=s3_server.subprocess_env())
    assert proc.returncode == 0, proc.stderr
    assert "'requests':" in proc.stdout and "'retries': 0" in proc.stdout
    import trajscale
    from trajscale.analysis import RMSD

    left = np.load(tmp_path / "left.npz")
    here = trajscale.run(RMSD(select="name CA"), TPR, local)
    assert np.array_equal(left["rmsd"], here.rmsd)
    import h5py

    with h5py.File(local) as f:
        assert np.array_equal(left["values"], f["particles/all/position/value"][0])


def _console_blocks(text: str) -> list[list[str]]:
    """Each console block's commands (``$ `` taken off, continuation lines joined, comments cut)."""
    blocks = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        cmds = [c.split("  #")[0].strip()[2:] for c in re.sub(r"\\\n\s*", "", block).splitlines()
                if c.strip().startswith("$ ")]
        blocks.append(cmds)
    return blocks


@pytest.mark.cli
@pytest.mark.slow
def test_the_pages_commands_run_on_urls(s3_server, adk_stores, tmp_path):
    """Every console block of the page that names a URL runs as written against the suite's server: its bucket
    ``my-bucket`` (public), the page's web server and MinIO endpoint replaced by the server's, AdK as
    ``top.tpr`` and ``adk.h5md``, AdK's XTC in two parts as ``part_000.xtc`` and ``part_001.xtc``, and an
    ``aws s3 cp`` done by boto3. Each run's CSV equals the same command's on the local files (the URL's file
    name in the block's folder); a run without ``--out`` prints the local run's selection and frames."""
    import fnmatch
    import shlex
    import shutil

    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    from .conftest import XTC

    local, _, _ = adk_stores["plain"]
    client = s3_server.client()
    client.create_bucket(Bucket="my-bucket")
    client.upload_file(local, "my-bucket", "adk.h5md", ExtraArgs={"ACL": "public-read"})
    with XTCFile(XTC) as f:
        cut = int(f.offsets[5])
    data = open(XTC, "rb").read()
    swap = {"https://example.org/data/adk.h5md": f"{s3_server.endpoint}/my-bucket/adk.h5md",
            "http://minio.lab:9000": s3_server.endpoint}
    blocks = [b for b in _console_blocks(PAGE.read_text()) if any("://" in c for c in b)]
    ran = 0
    for n, block in enumerate(blocks):
        here = tmp_path / f"block{n}"
        here.mkdir()
        shutil.copy(TPR, here / "top.tpr")
        shutil.copy(local, here / "adk.h5md")
        (here / "part_000.xtc").write_bytes(data[:cut])
        (here / "part_001.xtc").write_bytes(data[cut:])
        for cmd in block:
            for page, ours in swap.items():
                cmd = cmd.replace(page, ours)
            args = shlex.split(cmd)
            if args[:3] == ["aws", "s3", "cp"]:   # the files it names, uploaded where it puts them
                bucket, _, prefix = args[4][len("s3://"):].partition("/")
                keep = [args[k + 1] for k, a in enumerate(args) if a == "--include"]
                for f in sorted(here.iterdir()):
                    if any(fnmatch.fnmatch(f.name, pat) for pat in keep):
                        client.upload_file(str(f), bucket, prefix + f.name)
                continue
            assert args[0] == "trajscale", cmd
            proc = subprocess.run([sys.executable, "-m", "trajscale.cli.main", *args[1:]], cwd=here,
                                  capture_output=True, text=True, timeout=300, env=s3_server.subprocess_env())
            assert proc.returncode == 0, (cmd, proc.stderr)
            ran += 1
            urls = [a for a in args if "://" in a and not a.startswith("endpoint_url=")]
            if args[1] != "run" or not urls:
                continue
            # the same command on the local files: the same numbers
            mine = [a for k, a in enumerate(args[1:], 1) if "--storage-option" not in (a, args[k - 1])]
            mine[mine.index(urls[0])] = urls[0].rsplit("/", 1)[1]
            if "--out" in mine:
                out = mine[mine.index("--out") + 1]
                mine[mine.index(out)] = f"local-{out}"
            there = subprocess.run([sys.executable, "-m", "trajscale.cli.main", *mine], cwd=here,
                                   capture_output=True, text=True, timeout=300)
            assert there.returncode == 0, (mine, there.stderr)
            if "--out" in mine:
                assert (here / out).read_bytes() == (here / f"local-{out}").read_bytes(), cmd
            else:   # the summary: its selection and frames as the local run's (its timings differ)
                assert proc.stdout.splitlines()[:2] == there.stdout.splitlines()[:2], (proc.stdout, there.stdout)
    assert len(blocks) >= 3 and ran >= 5, (blocks, ran)
