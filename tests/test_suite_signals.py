"""The suite takes Ctrl-C as from a terminal, even when it is started where SIGINT is ignored."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_a_suite_started_with_sigint_ignored_still_tests_ctrl_c():
    """A shell's background job (``make test &``) inherits SIGINT ignored: the Ctrl-C tests of the kernels
    (SIGINT to a plain Python process the test starts) still see a terminal's Ctrl-C."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "tests/kernels/test_pairs.py::test_ctrl_c_interrupts_a_long_kernel_promptly"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout
