"""The benchmarks' smoke runs share one 20-frame demo file (AdK in water) per test run, built once."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from .smoke import F


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Path:
    """A folder holding the demo files (``adk_20.h5md`` and the whole-protein XTC it was converted from),
    built once for the test run: under xdist, by the first worker that needs them (the others wait on a
    lock), in the folder the workers' temporary folders share."""
    from trajscale.demo import build_demo_file

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "bench-demo"
    folder.mkdir(exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build_demo_file(folder, int(F), progress=False)   # returns at once where a worker built it already
    return folder


@pytest.fixture(scope="module")
def work(tmp_path_factory, demo) -> Path:
    """The module's work folder, the shared demo files linked into it (the scripts find them there)."""
    folder = tmp_path_factory.mktemp("bench")
    for name in (f"adk_{F}.h5md", "adk_whole.xtc"):
        (folder / name).symlink_to(demo / name)
    return folder
