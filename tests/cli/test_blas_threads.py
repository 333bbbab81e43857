"""The command line keeps NumPy's BLAS to one thread (its executors are the parallelism), unless told."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
from trajscale.cli.main import main
try:
    main(["--version"])
except SystemExit:
    pass
import numpy, threadpoolctl
print(max(p["num_threads"] for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"))
"""


@pytest.mark.cli
@pytest.mark.parametrize("given, want", [(None, "1"), ("2", "2")])
def test_openblas_threads_after_the_command_line_starts(given, want):
    pytest.importorskip("threadpoolctl")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    if given:
        env["OPENBLAS_NUM_THREADS"] = given
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == want, proc.stdout
