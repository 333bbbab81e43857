"""The Python API where users write it: scripts without a ``__main__`` guard, stdin, Ctrl-C.

Every script runs in a fresh interpreter, as a user's would, and its RMSDs are
checked against MDAnalysis's ``rms.RMSD`` on the DCD the H5MD file was made from.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mda_rmsd(adk_vacuum):
    return rms.RMSD(mda.Universe(*adk_vacuum), select="name CA").run().results.rmsd[:, 2]


def script(adk_vacuum, h5, out, executor: str) -> str:
    """The README's snippet at a script's top level: no ``if __name__ == "__main__":``."""
    return textwrap.dedent(f"""
        import numpy as np
        import trajscale as ts
        r = ts.run(ts.RMSD(select="name CA"), {adk_vacuum[0]!r}, {h5!r}, executor={executor!r}, n_workers=2)
        np.save({str(out)!r}, r.rmsd)
        print("ran on", r.report.executor, r.report.n_workers)
    """)


def run_python(args, *, stdin=None, env=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]), **(env or {}))
    return subprocess.run([sys.executable, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.parametrize("how", ["file", "stdin"])
@pytest.mark.parametrize("method", [None, "forkserver", "spawn"])
def test_unguarded_script_with_processes(tmp_path, adk_vacuum, adk_vacuum_h5md, mda_rmsd, how, method):
    out = tmp_path / "rmsd.npy"
    code = script(adk_vacuum, adk_vacuum_h5md, out, "processes")
    env = {"TRAJSCALE_START_METHOD": method} if method else {}
    if how == "file":
        path = tmp_path / "analyse.py"
        path.write_text(code)
        proc = run_python([str(path)], env=env)
    else:   # python - <<EOF
        proc = run_python(["-"], stdin=code, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ran on processes 2") == 1, proc.stdout   # the top level ran once
    assert "Traceback" not in proc.stderr, proc.stderr
    np.testing.assert_allclose(np.load(out), mda_rmsd, atol=1e-4)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_unguarded_dask_script(tmp_path, adk_vacuum, adk_vacuum_h5md, mda_rmsd):
    pytest.importorskip("distributed")
    out = tmp_path / "rmsd.npy"
    proc = run_python(["-"], stdin=script(adk_vacuum, adk_vacuum_h5md, out, "dask"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("ran on dask 2") == 1, proc.stdout
    np.testing.assert_allclose(np.load(out), mda_rmsd, atol=1e-4)


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs process groups")
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_ctrl_c_while_workers_start(tmp_path, adk_vacuum, adk_vacuum_h5md, method):
    """Ctrl-C reaches the whole process group (a terminal's): one clean message, no worker traceback."""
    cmd = [sys.executable, "-m", "trajscale.cli.main", "-v", "run", "rmsd", adk_vacuum[0], adk_vacuum_h5md,
           "--executor", "processes", "-n", "2", "--no-progress"]
    # every block read 1 s longer (a test hook): the run (0.3 s) cannot end before the signal arrives even if a
    # loaded machine wakes this test late after the line below
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
               TRAJSCALE_START_METHOD=method, TRAJSCALE_TEST_SLOW_READ="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    seen = []
    for line in proc.stderr:   # the debug line logged just before the workers start
        seen.append(line)
        if "worker processes (" in line:
            break
    assert seen and "worker processes (" in seen[-1], "".join(seen)
    os.killpg(proc.pid, signal.SIGINT)   # what a terminal's Ctrl-C does: every process of the group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "signal 2" in err or "interrupted" in err, err
    assert "worker processes (" + method in seen[-1]
    for _ in range(400):   # workers and forkserver are gone too (20 s: workers still spawning exit late under load)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("processes of the interrupted run are still alive")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_the_forkserver_holds_sigint_blocked():
    """A forkserver starts with an empty signal mask (fork+exec), so a worker forked from it could take a
    Ctrl-C before its initializer ignores it; the forkserver blocks SIGINT itself, for them to inherit.
    (In a new interpreter: a process keeps the first forkserver it started, whoever started it.)"""
    code = textwrap.dedent("""
        from multiprocessing import forkserver
        from trajscale.executors.processes import ProcessExecutor
        ex = ProcessExecutor(2, start_method="forkserver")
        ex.start()
        for f in ex._warm:
            f.result(timeout=120)
        status = open(f"/proc/{forkserver._forkserver._forkserver_pid}/status").read()
        print(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk")))
        ex.close()
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)])))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[-1], 16) & (1 << (signal.SIGINT - 1)), proc.stdout
