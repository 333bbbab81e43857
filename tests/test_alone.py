"""A test marked ``fork`` runs whichever worker gets it: in a process that cannot fork (a thread runs there), it
runs alone in a fresh process, and its outcome there is the test's."""

from __future__ import annotations

import os

import pytest

from tests.alone import ALONE

MODULE = """
import os, threading
import pytest
from trajscale.pools import fork_refusal

if not os.environ.get("{alone}"):   # (this process: a thread an earlier test left)
    threading.Thread(target=threading.Event().wait, daemon=True).start()


@pytest.mark.fork
def test_forks(tmp_path_factory):
    assert fork_refusal() is None
    with open({ran!r}, "a") as fh:
        fh.write(f"{{os.getpid()}}\\n")
    assert {passes}
"""


@pytest.fixture
def suite(pytester, monkeypatch):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv(ALONE, raising=False)
    pytester.makeconftest('pytest_plugins = ["tests.alone"]\n')
    pytester.makeini("[pytest]\nmarkers =\n    fork: forks\n    cli: starts a process\n")
    return pytester


@pytest.mark.cli
@pytest.mark.parametrize("passes", [True, False])
def test_a_fork_test_runs_alone_where_its_process_cannot_fork(suite, tmp_path, passes):
    ran = tmp_path / "ran"
    suite.makepyfile(test_it=MODULE.format(alone=ALONE, ran=str(ran), passes=passes))
    r = suite.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(passed=1 if passes else 0, failed=0 if passes else 1)
    assert len(ran.read_text().split()) == 1   # once, in a process of its own: not skipped, not run twice
    if not passes:
        assert "run in a process of its own (this one cannot fork), it failed" in r.stdout.str()
