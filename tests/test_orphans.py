"""Workers die with their parent: ``kill -9`` of the main process of ``convert`` or of ``run
--executor processes -n 2`` leaves no worker behind, and nothing writes to the partial output after.

Processes are found in /proc (the children of a pid, and theirs); ``kill -9`` is the real signal.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from MDAnalysisTests import datafiles as D

pytestmark = [pytest.mark.cli, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (zombies excluded: they are dead and write nothing)."""
    parents: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for c in parents.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _alive(pids: set[int]) -> set[int]:
    live = set()
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    live.add(p)
        except OSError:
            continue
    return live


def _kill_parent_and_time(proc, workers_at_least: int, ready, deadline_s: float = 240) -> tuple[set, float]:
    """Once ``ready()`` and ``workers_at_least`` processes run below ``proc``: SIGKILL it; return the
    processes that were below it and the seconds until the last of them was gone (or inf)."""
    deadline = time.time() + deadline_s
    kids: set[int] = set()
    while time.time() < deadline and proc.poll() is None:
        kids = _descendants(proc.pid)
        if len(kids) >= workers_at_least and ready():
            break
        time.sleep(0.05)
    assert proc.poll() is None and len(kids) >= workers_at_least, \
        f"the command ended (or started no workers) before the test could kill it: {proc.stderr.read()[-2000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    t0 = time.time()
    proc.wait(timeout=60)
    while _alive(kids) and time.time() - t0 < 30:
        time.sleep(0.02)
    gone = time.time() - t0
    return kids, (gone if not _alive(kids) else float("inf"))


def _env(**kw) -> dict:
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **kw)


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_convert_workers_die_with_a_killed_parent_and_write_no_more(tmp_path, method, request):
    out = tmp_path / "out.h5md"
    partial = tmp_path / ".out.h5md.convert-partial"
    # small slabs, each counted: the workers write for a long while; frames are read slowly
    # the run's temporary folder, to see what a killed parent leaves there (short: a socket's path is in it)
    temp = Path(tempfile.mkdtemp(prefix="orphans-"))
    request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
    env = _env(TRAJSCALE_CONVERT_SLAB_MB="0.2", TRAJSCALE_CONVERT_COUNT_MB="0.2", TRAJSCALE_START_METHOD=method,
               TMPDIR=str(temp))
    cmd = [sys.executable, "-m", "trajscale.cli.main", "convert", D.GRO, *[D.XTC] * 30, "-o", str(out),
           "--select", "protein", "--chunks", "5", "--no-progress", "--executor", "processes", "-n", "2"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)

    def counting() -> bool:
        for k in range(2):
            rec = tmp_path / f".out.h5md.convert-progress.{k}.json"
            try:
                if json.loads(rec.read_text()).get("done", 0) > 0:
                    return True
            except (OSError, ValueError):
                pass
        return False
    kids, seconds = _kill_parent_and_time(proc, 2, counting)
    print(f"convert ({method}): {len(kids)} processes below the parent gone {seconds:.2f} s after kill -9")
    assert seconds < 10, f"workers {_alive(kids)} outlived their parent"
    st = partial.stat()
    time.sleep(2)
    st2 = partial.stat()
    assert (st2.st_mtime_ns, st2.st_size) == (st.st_mtime_ns, st.st_size), "the partial changed after the kill"
    assert not out.exists()
    # only trajscale's folders of the dead parent (a forkserver's listener among them, not multiprocessing's
    # pymp-* that only a clean exit removes), and the next run removes them
    left = os.listdir(temp)
    assert all(n.startswith(f"trajscale-tasks-{proc.pid}-") for n in left), left
    from trajscale.util import process_folder

    os.rmdir(process_folder(where=str(temp)))
    assert os.listdir(temp) == []


def test_run_processes_workers_die_with_a_killed_parent(tmp_path):
    # every block read 1 s longer: the run lasts while the test kills its parent
    env = _env(TRAJSCALE_TEST_SLOW_READ="1", TRAJSCALE_START_METHOD="fork")
    cmd = [sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", D.GRO, D.XTC, "--select", "name CA",
           "--executor", "processes", "-n", "2", "--tasks", "10", "--out", str(tmp_path / "r.csv")]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    kids, seconds = _kill_parent_and_time(proc, 2, lambda: True)
    print(f"run: {len(kids)} processes below the parent gone {seconds:.2f} s after kill -9")
    assert seconds < 10, f"workers {_alive(kids)} outlived their parent"
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_resume_refuses_a_partial_that_a_live_process_writes(tmp_path):
    """``--resume`` while another convert writes the partial output is refused in one line; once that
    one is stopped, --resume finishes the file."""
    out = tmp_path / "out.h5md"
    record = tmp_path / ".out.h5md.convert-progress.json"
    env = _env(TRAJSCALE_CONVERT_SLAB_MB="0.02")   # a frame per slab, each counted
    cmd = [sys.executable, "-m", "trajscale.cli.main", "convert", D.GRO, *[D.XTC] * 12, "-o", str(out),
           "--select", "protein", "--chunks", "5", "--no-progress"]
    # the writer reads each slab 0.25 s longer: its 120 frames (30 s) outlast the refusal on a loaded machine (it
    # had finished, and renamed its output, before the SIGTERM once), and the resume after decodes few frames
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**env, "TRAJSCALE_TEST_SLOW_READ": "0.25"})
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        try:
            if json.loads(record.read_text()).get("done", 0) > 0:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    try:
        assert proc.poll() is None, "the convert ended before the test could resume it: " + proc.stderr.read()
        r = subprocess.run(cmd + ["--resume"], check=False, capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode != 0, r.stderr
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and f"another process (pid {proc.pid} on " in lines[0], r.stderr
        assert proc.poll() is None, "the writer ended before the refusal could be checked"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    assert not out.exists()
    r = subprocess.run(cmd + ["--resume"], check=False, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and out.exists(), r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.h5md"]


#: A script whose DataLoader workers each note their pid, then hang in a transform that never ends.
LOADER_SCRIPT = """
import os, sys, time
from MDAnalysisTests import datafiles as D
from trajscale.ml import make_loader
from trajscale.ml.dataset import FrameDataset

def note(worker_id):
    open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()

def hang(item):
    time.sleep(600)
    return item

if __name__ == "__main__":
    ds = FrameDataset(D.GRO, D.XTC, select="name CA", transform=hang)
    loader = make_loader(ds, batch_size=4, num_workers=2, multiprocessing_context=sys.argv[2] or None,
                         worker_init_fn=note)
    next(iter(loader))
"""


@pytest.mark.parametrize("method", ["fork", pytest.param("forkserver", marks=pytest.mark.slow(seconds=2))])
def test_loader_workers_die_with_a_killed_parent(tmp_path, method):
    """A PyTorch loader's workers (make_loader's) busy in a transform die with their parent killed by kill -9:
    forked ones (the kernel's parent-death signal), and those a forkserver started (they watch the parent)."""
    pytest.importorskip("torch")
    script = tmp_path / "loader.py"
    script.write_text(LOADER_SCRIPT)
    noted = tmp_path / "pids"
    noted.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(noted), method], stderr=subprocess.PIPE, text=True,
                            env=_env())
    kids, seconds = _kill_parent_and_time(proc, 2, lambda: len(os.listdir(noted)) >= 2)
    workers = {int(p) for p in os.listdir(noted)}
    print(f"loader ({method}): {len(kids)} processes below the parent gone {seconds:.2f} s after kill -9")
    assert workers <= kids and not _alive(workers | kids), f"workers {_alive(workers | kids)} outlived their parent"
    assert seconds < 10
