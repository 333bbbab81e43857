"""The suite's tiers, enforced: a test is marked by how it runs (pyproject.toml declares the markers).

* ``mpi``: the test starts ``mpiexec`` (or ``mpirun``/``srun``).
* ``cli``: the test starts another process (the trajscale CLI, another Python, ``gmx``, ``git``, ...).
  ``mpi`` and ``tool`` tests start processes too and need no ``cli`` besides.
* ``slow``: the test takes more than 5 s on an idle machine, or (``slow(seconds=2)``, by hand) it starts
  whole runs or a Dask cluster worth about 2 s of CPU: left out of the quick tier (``make check``) for its time.
* ``tool``: the test builds or runs a tool (packaging, docs, benchmarks, fuzzing).
* ``slurm``: the test uses the local SLURM (tests/slurm): it starts ``sbatch``, ``srun``, ``squeue``, ...;
  ``srun`` needs no ``mpi`` besides. Its jobs' work runs under slurmd, not below the test, so a long one is
  marked ``slow`` by hand.

What a test starts is seen by an audit hook (``sys.addaudithook``, event ``subprocess.Popen``) while the
test's setup and call run in this process (a fixture shared by several tests is not counted: which test sets
it up depends on the selection); a process started by a process the test started (a CLI that
launches ``mpiexec``) is not seen, so a test like that is marked by hand. Worker pools
(``multiprocessing``, Dask's ``LocalCluster``) start their processes without ``subprocess.Popen``: they are
in-process machinery and need no marker.

How long an unmarked test takes on an idle machine is estimated as the smaller of its wall time and the CPU
time (user + system, every thread, and the children it waited for) that this process spent in the call.
Other developers' load stretches the wall time but hardly the CPU time; threads add CPU time but not wall
time; so the smaller of the two tracks the idle wall time of a test that computes, on a loaded machine as on
an idle one. Time spent sleeping or waiting for I/O is not counted, and a test slowed by memory-bandwidth
contention reads a little long: the limit has ``GRACE`` on top of the 5 s for that.

Under ``pytest -n N --dist loadfile --no-loadscope-reorder`` (``make test``, ``make check``: N is the cores and
two more) a module's tests run on one worker, so its fixtures are made once, and the modules are handed out in
the suite's order as workers free up: those with SLURM tests first (they mostly wait on the scheduler), then
those whose slow or tool tests take longest (each counts ``SLOW_TEST_S`` seconds unless its ``slow`` marker
says ``seconds=``), then those with MPI tests, then the rest, so that no long module
starts last and the short ones fill the end.

``TRAJSCALE_TIERS_RECORD=FILE`` records every test's markers, times and started commands as JSON lines in
FILE instead of failing (how the markers were first assigned: ``TRAJSCALE_TIERS_RECORD=rec.jsonl pytest -n auto
tests``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

#: The idle time past which an unmarked test must be marked ``slow``.
SLOW_S = 5.0
#: What a slow or tool test counts for in the suite's order, in seconds, unless it says more
#: (``@pytest.mark.slow(seconds=90)``: a test that runs a whole suite in one subprocess, say).
SLOW_TEST_S = 10.0
#: Allowance for CPU time stretched by contention on a loaded machine (caches, memory bandwidth).
GRACE = 1.2
#: Program names that launch MPI jobs.
LAUNCHERS = ("mpiexec", "mpirun", "srun", "orterun")
#: Markers under which a test may start another process.
PROCESS_MARKERS = ("cli", "mpi", "tool", "slurm")
#: Markers under which a test may start a launcher.
LAUNCH_MARKERS = ("mpi", "slurm")
#: Markers that exempt a test from the time limit.
TIMED_EXEMPT = ("slow", "mpi", "cli", "tool")

_started: list[list[str]] | None = None


def _audit(event: str, args: tuple) -> None:
    if event == "subprocess.Popen" and _started is not None:
        executable, argv = args[0], args[1]
        if isinstance(argv, (str, bytes, os.PathLike)):
            argv = [argv]
        argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
        if executable is not None:
            argv = [os.fsdecode(executable), *argv[1:]]
        _started.append(argv)


sys.addaudithook(_audit)


def _is_launcher(argv: list[str]) -> bool:
    name = Path(argv[0]).name if argv else ""
    return name.startswith(LAUNCHERS)


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _marks(item: pytest.Item) -> set[str]:
    return {m.name for m in item.iter_markers()} & {"mpi", "cli", "slow", "tool", "slurm"}


def _command(argv: list[str]) -> str:
    text = " ".join(argv)
    return text if len(text) <= 160 else text[:157] + "..."


def problems(marks: set[str], started: list[list[str]], idle_s: float) -> list[str]:
    """What is wrong with a test's markers, one line each (none: the markers fit what it did)."""
    out = []
    launched = [a for a in started if _is_launcher(a)]
    if launched and not marks & set(LAUNCH_MARKERS):
        out.append(f"starts {Path(launched[0][0]).name} ({_command(launched[0])}) but is not marked `mpi`: "
                   "add @pytest.mark.mpi (or `pytestmark = pytest.mark.mpi` for the whole file)")
    others = [a for a in started if not _is_launcher(a)]
    if others and not marks & set(PROCESS_MARKERS):
        out.append(f"starts a process ({_command(others[0])}) but is not marked `cli`: add @pytest.mark.cli "
                   "(or `pytestmark = pytest.mark.cli` for the whole file), or test it in-process")
    if not marks & set(TIMED_EXEMPT) and idle_s > SLOW_S * GRACE:
        out.append(f"takes {idle_s:.1f} s (the smaller of wall and CPU time) but is not marked `slow`: "
                   f"add @pytest.mark.slow, or make it take under {SLOW_S:.0f} s")
    return out


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    global _started
    _started = []
    try:
        return (yield)
    finally:
        item.stash[_SETUP_KEY] = _started
        _started = None


_SETUP_KEY = pytest.StashKey[list]()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    # A fixture shared by several tests (module, class or session scope) is set up by whichever of them runs
    # first, which depends on the selection and the worker: what it starts is nobody's, and not counted.
    global _started
    if fixturedef.scope == "function" or _started is None:
        return (yield)
    saved, _started = _started, None
    try:
        return (yield)
    finally:
        _started = saved


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # module -> the seconds of its slow or tool tests, its MPI tests, its SLURM tests
    slow = Counter()
    for i in items:
        mark = i.get_closest_marker("slow") or i.get_closest_marker("tool")
        if mark:   # a test that one subprocess makes long says so: @pytest.mark.slow(seconds=90)
            slow[i.path] += (i.get_closest_marker("slow") or mark).kwargs.get("seconds", SLOW_TEST_S)
    mpi = Counter(i.path for i in items if i.get_closest_marker("mpi"))
    slurm = Counter(i.path for i in items if i.get_closest_marker("slurm"))

    def rank(item: pytest.Item) -> tuple[int, int]:
        if slurm[item.path]:   # mostly waits on the scheduler (a job's time limit is a minute or more): first
            return -1, -slurm[item.path]
        if slow[item.path]:
            return 0, -slow[item.path]
        return (1, -mpi[item.path]) if mpi[item.path] else (2, 0)

    items.sort(key=rank)   # stable: a module's tests stay together, in their own order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    global _started
    _started = list(item.stash.get(_SETUP_KEY, []))
    wall0, cpu0 = time.perf_counter(), _cpu_seconds()
    try:
        result = yield
    finally:
        wall, cpu = time.perf_counter() - wall0, _cpu_seconds() - cpu0
        started, _started = _started, None
    found = problems(_marks(item), started, min(wall, cpu))
    record = os.environ.get("TRAJSCALE_TIERS_RECORD")
    if record:
        line = {"test": item.nodeid, "marks": sorted(_marks(item)), "wall": round(wall, 3), "cpu": round(cpu, 3),
                "started": [_command(a) for a in started], "problems": found}
        with open(record, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    elif found:
        raise pytest.fail.Exception("; ".join(found), pytrace=False)
    return result
