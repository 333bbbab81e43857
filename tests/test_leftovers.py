"""The suite's session fails if it leaves trajscale's entries in /dev/shm or the temporary folder (tests/conftest.py):
its listing sees what a run leaves there, and not what a running process still uses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.conftest import trajscale_made


@pytest.mark.cli
@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="no /dev/shm here")
def test_the_listing_sees_what_a_run_leaves_and_not_what_a_live_process_uses():
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)
    planted = [os.path.join("/dev/shm", "train-0123456789abcdef.h5"),   # a node cache's copy
               os.path.join("/dev/shm", f"trajscale-fuzz-{os.getpid()}x"),
               os.path.join(tempfile.gettempdir(), f"trajscale-tasks-{gone}-left"),   # its process is gone
               os.path.join(tempfile.gettempdir(), f"trajscale-tasks-{os.getpid()}-mine")]
    live = os.path.join(tempfile.gettempdir(), f"trajscale-tasks-{os.getppid()}-running")
    others = [os.path.join("/dev/shm", "sem.mp-test"), os.path.join(tempfile.gettempdir(), "other-0123456789abcdef")]
    before = trajscale_made()
    try:
        for p in [*planted, live, *others]:
            os.makedirs(p, exist_ok=True)
        assert trajscale_made() - before == set(planted)
    finally:
        for p in [*planted, live, *others]:
            shutil.rmtree(p, ignore_errors=True)
    assert trajscale_made() - before == set()
