"""A results folder is used by one run at a time: a second is refused in one line naming the holder, a dead
holder's lock is taken over, and ``--resume`` of a complete folder writes nothing (a read-only mount included)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import run_cli
from trajscale.ensemble.saved import ResultsFolder
from trajscale.errors import OutputError
from trajscale.util import host_name


def _command(catalog, results, out) -> list[str]:
    return ["run", "rgyr", "--select", "name CA", "--ensemble", str(catalog), "--results", str(results),
            "--out", str(out), "--executor", "serial", "-q"]


def _listing(folder) -> dict:
    """Every file and folder under ``folder`` with what a write changes: inode, size, mtime."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for n in dirs + files:
            st = os.stat(os.path.join(root, n))
            out[os.path.relpath(os.path.join(root, n), folder)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.cli
@pytest.mark.slow(seconds=6)
def test_four_concurrent_resumes_one_runs_three_are_refused(replicas, tmp_path):
    whole = run_cli(*_command(replicas["catalog"], tmp_path / "whole", tmp_path / "whole.csv"), cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    # each block's read sleeps 2 s: the run that holds the folder outlasts the others' starts on a loaded machine
    env = {**os.environ, "TRAJSCALE_TEST_SLOW_READ": "2"}
    procs = [subprocess.Popen([sys.executable, "-m", "trajscale.cli.main",
                               *_command(replicas["catalog"], tmp_path / "res", tmp_path / f"out{k}.csv"), "--resume"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(4)]
    said = [(p.pid, *p.communicate(timeout=300)) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2, 2, 2], said
    (winner,) = [pid for (pid, _, _), c in zip(said, codes, strict=True) if c == 0]
    for (_, _, err), c in zip(said, codes, strict=True):
        if c:
            lines = err.strip().splitlines()
            assert len(lines) == 1 and f"another process (pid {winner} on {host_name()}) is writing its results" \
                in lines[0] and str(tmp_path / "res") in lines[0], err
    k = [p.pid for p in procs].index(winner)
    assert (tmp_path / f"out{k}.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    assert sorted(p.name for p in tmp_path.glob("out*.csv")) == [f"out{k}.csv"]
    assert not (tmp_path / "res" / ".lock").exists()


# takes the lock as OutputLock does, then names itself only when told to (a line on stdin)
_SLOW_NAMER = """import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
name = f"{os.getpid()}@{os.uname().nodename}".encode()
os.pwrite(fd, name.ljust(os.fstat(fd).st_size), 0)
os.ftruncate(fd, len(name))
sys.stdin.read()
"""


@pytest.mark.cli
@pytest.mark.parametrize("left", ["", "dead"], ids=["new file", "dead run's file"])
def test_a_holder_not_yet_named_is_waited_for_and_named(tmp_path, left):
    """A run refused between its holder's taking the lock and writing its name in it (the file empty, or still
    naming the dead run that left it) names the holder that writes its name 100 ms later, not 'pid ?'."""
    (tmp_path / "res").mkdir()
    lock = tmp_path / "res" / ".lock"
    if left:
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
        lock.write_text(f"{dead.stdout.strip()}@{host_name()}")
    holder = subprocess.Popen([sys.executable, "-c", _SLOW_NAMER, str(lock)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert lock.read_text() == (f"{dead.stdout.strip()}@{host_name()}" if left else "")
        threading.Timer(0.1, lambda: (holder.stdin.write("\n"), holder.stdin.flush())).start()
        with pytest.raises(OutputError, match=f"another process \\(pid {holder.pid} on {host_name()}\\)"):
            ResultsFolder(tmp_path / "res", {"a": 1})
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.cli
def test_a_live_holder_is_named_and_a_dead_ones_lock_is_taken_over(tmp_path):
    """A process that holds the folder refuses this one, by pid and host; killed (SIGKILL: it removes nothing),
    its lock is no longer held and the next run takes the folder."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys, trajscale.ensemble.saved as s; "
                               f"s.folder_lock({str(tmp_path / 'res')!r}).take(); print('held', flush=True); "
                               "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OutputError, match=f"another process \\(pid {holder.pid} on {host_name()}\\)"):
            ResultsFolder(tmp_path / "res", {"a": 1})
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / "res" / ".lock").read_text() == f"{holder.pid}@{host_name()}"   # left behind, not held
    folder = ResultsFolder(tmp_path / "res", {"a": 1})
    assert folder.own_lock and (tmp_path / "res" / ".lock").read_text() == f"{os.getpid()}@{host_name()}"
    folder.lock.release()
    assert not (tmp_path / "res" / ".lock").exists()


@pytest.mark.cli
def test_resume_of_a_complete_folder_writes_nothing(replicas, tmp_path):
    first = run_cli(*_command(replicas["catalog"], tmp_path / "res", tmp_path / "a.csv"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = _listing(tmp_path / "res")
    time.sleep(0.05)   # (a rewrite would show in the mtimes)
    again = run_cli(*_command(replicas["catalog"], tmp_path / "res", tmp_path / "b.csv"), "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert _listing(tmp_path / "res") == before
    assert (tmp_path / "b.csv").read_bytes() == (tmp_path / "a.csv").read_bytes()
    # the same folder on a read-only mount (where this machine lets a user namespace bind-mount one)
    unshare = shutil.which("unshare")
    ro = tmp_path / "ro"
    ro.mkdir()
    script = (f"mount --bind {tmp_path / 'res'} {ro} && mount -o remount,bind,ro {ro} && "
              f"! touch {ro}/x 2>/dev/null && exec "
              + shlex.join([sys.executable, "-m", "trajscale.cli.main",
                            *_command(replicas["catalog"], ro, tmp_path / "c.csv"), "--resume"]))
    if unshare is None or subprocess.run([unshare, "-rm", "true"], capture_output=True).returncode:
        pytest.skip("no user namespace here to mount the folder read-only in")
    r = subprocess.run([unshare, "-rm", "sh", "-c", script], capture_output=True, text=True, cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert (tmp_path / "c.csv").read_bytes() == (tmp_path / "a.csv").read_bytes()
