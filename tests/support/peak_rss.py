"""Peak resident memory of a command and every process it starts (Linux).

A fresh helper process runs the command, becomes the "child subreaper" of
everything the command starts (process-pool workers, a forkserver, Dask
workers: orphans are handed to it, not to init) and waits for all of them.
``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of that helper is then the largest
peak RSS of any single process of the run, measured by the kernel.
"""

from __future__ import annotations

import json
import subprocess
import sys

_HELPER = r"""
import ctypes, json, os, resource, subprocess, sys
PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
cmd = json.loads(sys.argv[1])
proc = subprocess.run(cmd, capture_output=True, text=True)
while True:   # reap the orphans (forkserver, pool workers) so their usage counts
    try:
        os.wait()
    except ChildProcessError:
        break
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"rc": proc.returncode, "peak": peak, "stdout": proc.stdout, "stderr": proc.stderr}))
"""


def peak_rss(cmd: list[str], timeout: float = 600, env: dict | None = None) -> tuple[int, subprocess.CompletedProcess]:
    """Run ``cmd``; return the peak RSS (bytes) of its largest process and the completed command."""
    helper = subprocess.run([sys.executable, "-c", _HELPER, json.dumps(cmd)], capture_output=True,
                            text=True, timeout=timeout, env=env, check=True)
    out = json.loads(helper.stdout.strip().splitlines()[-1])
    return out["peak"], subprocess.CompletedProcess(cmd, out["rc"], out["stdout"], out["stderr"])
