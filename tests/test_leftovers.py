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


@pytest.mark.cli
def test_a_test_run_alone_leaves_the_check_to_the_suite(pytester, monkeypatch):
    """A test run alone in a pytest of its own (tests/alone.py) does not check the listing: what the suite's other
    tests make and remove meanwhile is theirs, and the suite's own session checks it at its end."""
    from tests.alone import ALONE

    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)
    meanwhile = os.path.join(tempfile.gettempdir(), f"trajscale-tasks-{gone}-meanwhile")
    pytester.makeconftest("from tests.conftest import pytest_sessionfinish, pytest_sessionstart, "
                          "pytest_terminal_summary  # noqa: F401")
    pytester.makepyfile(f"import os\n\n\ndef test_another_test_meanwhile():\n    os.makedirs({meanwhile!r})\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv(ALONE, "1")
    try:
        r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    finally:
        shutil.rmtree(meanwhile, ignore_errors=True)
    assert r.ret == 0, r.stdout.str()
    assert "the suite left" not in r.stdout.str()
