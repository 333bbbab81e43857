"""Pool workers start ready: each takes its first task moments after the pool is asked for, under every
start method, without having imported what no task asked for yet (NumPy, h5py, MDAnalysis, numba...).

Read from what each worker records about its own start (:func:`trajscale.executors.startup.warm_up`),
in a fresh process per start method (a forkserver outlives its pool: another test's could be reused).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cli

DRIVER = r"""
import json, sys
from trajscale.executors.processes import ProcessExecutor
if __name__ == "__main__":
    ex = ProcessExecutor(2, start_method=sys.argv[1])
    try:
        ex.start()
        starts = ex.worker_starts()
    finally:
        ex.close()
    print(json.dumps({"t_asked": ex.t_asked, "starts": starts}))
"""

#: Seconds from asking for the pool to a worker taking its first task.  About 0.05 s on an idle
#: 2-core machine (spawn: an interpreter and multiprocessing's own bootstrap); the bound is
#: generous because a crowded test machine stretches it, while the imports it guards against
#: (NumPy, h5py and numba before the first task) cost 0.3-1 s of CPU per worker.
FIRST_TASK_BOUND_S = 5.0


def _driven(driver: str, method: str, tmp_path) -> dict:
    """What ``driver``, run as a script with the start ``method``, printed as its last line (JSON)."""
    script = tmp_path / "driver.py"
    script.write_text(driver)
    proc = subprocess.run([sys.executable, str(script), method], check=False, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_pool_workers_take_their_first_task_promptly(method, tmp_path):
    got = _driven(DRIVER, method, tmp_path)
    asked, starts = got["t_asked"], got["starts"]
    assert len({s["pid"] for s in starts}) == 2
    for s in starts:
        # The OS's start time counts in 10 ms ticks: a process started just after the ask can read 10 ms early.
        assert asked - 0.05 <= s["t_process_start"] <= s["t_task_start"] <= s["t_ready"]
        assert s["t_task_start"] - asked < FIRST_TASK_BOUND_S
        assert 0 <= s["cpu_before_task"] < 1.0   # ~0.05 s under spawn (0.005 s forked); NumPy alone is ~0.1 s
        if method != "fork":   # a forked worker holds what its parent imported
            assert s["heavy_modules"] == [], f"{method} worker imported {s['heavy_modules']} before its first task"


PRELOAD_DRIVER = r"""
import json, sys
from trajscale.executors.processes import ProcessExecutor
from trajscale.sources import reader_modules
if __name__ == "__main__":
    ex = ProcessExecutor(2, start_method=sys.argv[1])
    try:
        ex.start(reader_modules(sys.argv[2].split(",")))
        starts = ex.worker_starts()
    finally:
        ex.close()
    print(json.dumps(starts))
"""


@pytest.mark.parametrize("method", ["fork", "forkserver"])
@pytest.mark.parametrize("parts", ["part1.xtc,part2.trr", "part1.xtc,part2.xtc"])
def test_workers_start_holding_what_the_jobs_tasks_import(method, parts, tmp_path):
    """A job on XTC/TRR parts: forked workers inherit trajscale's compiled XTC/TRR reader and NumPy from
    the parent, forkserver workers from their server, instead of each task importing them (issue 23);
    never MDAnalysis (0.5 s with SciPy), which a DCD part still needs."""
    from trajscale.sources import reader_modules

    # each part's format's Source module and what it reads with, and nothing of another format
    xdr = ("trajscale.xdr.source", "trajscale.xdr._xdr")
    assert reader_modules(["a.xtc", "b.trr"]) == xdr and reader_modules(["a.xtc", "b.XTC"]) == xdr
    assert reader_modules("a.h5md") == ("trajscale.h5md.source",)
    assert reader_modules("parts/index.json") == ("trajscale.sources.segments",)
    assert reader_modules("a.dcd") == ("trajscale.mdareaders.part", "MDAnalysis")
    assert reader_modules("a.npy") == ("trajscale.npy.source",)
    # a chain of XTC and DCD parts: each part read by its format's Source, which imports its own reader
    assert reader_modules(["a.xtc", "b.dcd"]) == (*xdr, "trajscale.mdareaders.part", "MDAnalysis")
    script = tmp_path / "pool_preload.py"
    script.write_text(PRELOAD_DRIVER)
    proc = subprocess.run([sys.executable, str(script), method, parts], check=False, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    starts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(starts) == 2
    for s in starts:
        assert "numpy" in s["heavy_modules"] and "MDAnalysis" not in s["heavy_modules"], s


KERNELS_DRIVER = r"""
import json, sys
from trajscale.executors.processes import ProcessExecutor
KERNELS = "sorted(m for m in __import__('sys').modules if m.startswith('trajscale.kernels.'))"
if __name__ == "__main__":
    ex = ProcessExecutor(2, start_method=sys.argv[1])
    try:
        ex.start()
        ex.worker_starts()   # (every warm-up done)
        got = [ex._get_pool().submit(eval, KERNELS).result() for _ in range(4)]   # (a builtin: __main__ is hidden)
    finally:
        ex.close()
    print(json.dumps({"parent": eval(KERNELS), "workers": got}))
"""


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_forked_workers_load_only_the_kernels_their_parent_holds(method, tmp_path):
    """A forked worker's warm-up loads no kernel its parent's analyses did not (the superposition kernels
    are RMSD's and fitting's: 3 ms of a φ/ψ run's worker); a forkserver's worker loads them before its
    first task, as the parent cannot have for it."""
    got = _driven(KERNELS_DRIVER, method, tmp_path)
    assert "trajscale.kernels.superpose" not in got["parent"]
    for loaded in got["workers"]:
        assert ("trajscale.kernels.superpose" in loaded) == (method == "forkserver"), got
