"""Tests marked ``fork`` start forked workers (an analysis registered in the test's own process, which spawned
workers would not know). A process forks its workers by default only where no other thread runs and no file is
held open (:func:`trajscale.pools.fork_is_safe`), and a test process may run threads or hold files an earlier test
left (Dask's offload thread): which tests ran before on an xdist worker would decide whether such a test runs or
skips. So a ``fork`` test runs in its worker's process where that process forks by default, and otherwise in a
fresh process of its own (``pytest NODEID``, ``TRAJSCALE_TEST_ALONE`` set), whose outcome is the test's: it runs,
whichever worker got it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: Set in the process a ``fork`` test runs alone in.
ALONE = "TRAJSCALE_TEST_ALONE"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("fork") is not None:
            item.add_marker(pytest.mark.cli)   # (it may start a process: pytest, running it alone)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    if pyfuncitem.get_closest_marker("fork") is None or os.environ.get(ALONE):
        return None
    from trajscale.pools import fork_is_safe

    if fork_is_safe():
        return None   # (this process forks its workers by default: the test runs here)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                        pyfuncitem.nodeid], cwd=pyfuncitem.config.rootpath, env={**env, ALONE: "1"},
                       capture_output=True, text=True, timeout=600, check=False)
    if r.returncode != 0:
        pytest.fail(f"run in a process of its own (this one cannot fork), it failed:\n{r.stdout[-6000:]}"
                    f"{r.stderr[-2000:]}", pytrace=False)
    return True
