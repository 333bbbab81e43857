"""An interrupted convert says what it left: nothing when it ended before writing (killed during its
imports), the frames written so far once its partial output exists."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from MDAnalysisTests import datafiles as D

from trajscale.convert.resume import unfinished

pytestmark = pytest.mark.cli

SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has its own SIGTERM handler (trajscale's main installs it before any work)."""
    with open(f"/proc/{pid}/status") as f:
        caught = next(line for line in f if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & SIGTERM_BIT)


def _convert(out, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trajscale.cli.main", "convert", D.GRO, *[D.XTC] * 20,
                             "-o", str(out), "--no-progress", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TRAJSCALE_CONVERT_SLAB_MB="0.2", PYTHONUNBUFFERED="1"))


def _wait_for(cond, proc, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"never saw {what}: {proc.communicate()[1][-2000:]}")
        time.sleep(0.005)


def test_convert_killed_during_its_imports_says_nothing_was_written(tmp_path):
    out = tmp_path / "out.h5md"
    proc = _convert(out)
    _wait_for(lambda: _catches_sigterm(proc.pid), proc, "trajscale's SIGTERM handler")
    os.kill(proc.pid, signal.SIGTERM)   # before the topology is read: MDAnalysis takes seconds to import
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert err.strip() == f"trajscale convert: terminated by signal 15; nothing was written yet: no partial " \
                          f"output of {out} was kept", err
    assert not out.exists() and not any(p.exists() for p in unfinished(out, "convert"))


#: ``trajscale convert`` whose SIGTERM arrives as soon as trajscale's handler is installed.
SIGNAL_AT_INSTALL = """
import os, signal, sys
from trajscale.cli import main as cli

install = signal.signal

def install_then_signalled(signum, handler):
    previous = install(signum, handler)
    if signum == signal.SIGTERM and callable(handler):
        os.kill(os.getpid(), signal.SIGTERM)   # handled at the next line of main's Python
    return previous

signal.signal = install_then_signalled
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_signal_landing_as_soon_as_its_handler_is_in_place_is_said(tmp_path):
    """SIGTERM delivered right after trajscale's handler is installed (a killer that waits for the handler, as
    the test above does, can send it there) ends the command with its one line, not a silent exit 143."""
    out = tmp_path / "out.h5md"
    proc = subprocess.run([sys.executable, "-c", SIGNAL_AT_INSTALL, "convert", D.GRO, D.XTC, "-o", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.strip() == f"trajscale convert: terminated by signal 15; nothing was written yet: no partial " \
                                  f"output of {out} was kept", proc.stderr
    assert not out.exists()


def test_convert_killed_while_writing_keeps_its_frames(tmp_path):
    out = tmp_path / "out.h5md"
    proc = _convert(out, "--chunks", "5")
    record = unfinished(out, "convert")[1]
    _wait_for(record.exists, proc, f"{record}")
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the convert finished before the signal arrived")
    assert proc.returncode == 143, err
    assert "the frames written so far are kept: run the same command with --resume" in err, err
    assert any(p.exists() for p in unfinished(out, "convert"))


#: A signal landing while a weakref callback runs (as importlib's module-lock callback does during imports):
#: the exit its handler raises there is one Python cannot raise.
SIGNAL_IN_A_CALLBACK = """
import os, signal, sys, time, weakref
from trajscale.cli import main as cli

cli._unraisable_hook()
signal.signal(signal.SIGTERM, cli._terminate)   # as main() installs them, in this order

class Lock:
    pass

def released(ref):
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):   # the handler runs here, inside the callback
        pass

lock = Lock()
ref = weakref.ref(lock, released)
del lock
for _ in range(200):
    time.sleep(0.001)
print("went on")
"""


def test_a_signal_inside_a_callback_still_ends_the_command():
    """The exit is not dropped: the signal is raised again and ends the process once the callback returns."""
    proc = subprocess.run([sys.executable, "-c", SIGNAL_IN_A_CALLBACK], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "went on" not in proc.stdout, (proc.stdout, proc.stderr)
    assert "Exception ignored" not in proc.stderr, proc.stderr


#: The handler's exit raised where a library turns it into an error of its own (numpy does, importing
#: ``datetime`` from C: an ImportError).
SIGNAL_IN_A_LIBRARY = """
import os, signal
from trajscale.cli import main as cli

def work(args):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except SystemExit as exc:
        raise ImportError("a library's own error") from exc

parse = cli.parse_args
def parse_args(argv=None):
    args = parse(argv)
    args.func = work
    return args

cli.parse_args = parse_args
raise SystemExit(cli.main(["inspect", "any.h5md"]))
"""


def test_a_signal_turned_into_a_library_error_still_ends_the_command_in_one_line():
    proc = subprocess.run([sys.executable, "-c", SIGNAL_IN_A_LIBRARY], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.stdout, proc.stderr)
    assert proc.stderr.strip() == "trajscale inspect: terminated by signal 15; no partial output was kept", proc.stderr
