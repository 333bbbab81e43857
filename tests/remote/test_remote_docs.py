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
