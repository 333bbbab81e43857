"""The whole wall time of a process, from its start as the OS counts it.

By the time ``trajscale.run`` is called a new process has spent most of its life starting the interpreter and
importing, so this module measures from the process's start (Linux: ``/proc/self/stat``'s ``starttime`` against
``CLOCK_BOOTTIME``, 10 ms resolution; ``btime`` is whole seconds): :func:`mark_ready` (a worker's ``t_start``) and
:class:`ProcessTimeline` (the launching process's phases, adding up to its wall time).

Test hooks, for the report's straggler detection: ``TRAJSCALE_TEST_SLOW_START="SECONDS[:WHO]"`` (``WHO``: an MPI
rank, or ``one``: the first pool worker) slows a worker's start; ``TRAJSCALE_TEST_SLOW_READ`` and
``TRAJSCALE_TEST_SLOW_COMPUTE="SECONDS[:RANK]"`` each block's read or map
(:func:`trajscale.util.slow_phase_for_tests`)."""

from __future__ import annotations

import itertools
import os
import sys
import time

#: The launching process's phases, in the order they happen.
#: ``cluster_start`` (a Dask scheduler started or reached) and ``queue_wait`` (workers' batch jobs pending
#: in the scheduler's queue) are noted by :mod:`trajscale.clusters`, apart from the workers' start.
PROCESS_PHASES = ("imports", "mpi_init", "topology", "prepare", "cluster_start", "queue_wait", "pool_start", "tasks",
                  "reduce", "report", "write")
PROCESS_PHASE_LABELS = {
    "imports": "interpreter and imports", "mpi_init": "MPI init", "topology": "topology",
    "prepare": "prepare", "cluster_start": "cluster start", "queue_wait": "queue wait",
    "pool_start": "pool start/stop", "tasks": "tasks", "reduce": "reduce", "report": "report",
    "write": "writing results",
}

_IMPORTED_AT = time.time()
_READY: dict[int, float] = {}      # pid -> seconds from the process's start to ready
_TIMED_RUNS: set[int] = set()      # pids whose first run's timeline has started
_NOTES: dict[int, dict[str, float]] = {}   # pid -> phase -> seconds noted, not yet claimed
_START: dict[int, float] = {}      # pid -> process start, epoch seconds


def _linux_age(pid: int | str = "self") -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        # Field 22 (starttime); fields are counted after the command name, which may hold spaces.
        fields = stat[stat.rindex(b")") + 2:].split()
        ticks = int(fields[19])
        boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return max(0.0, boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def process_start() -> float:
    """Epoch seconds when this process started (see the module docstring for how)."""
    pid = os.getpid()
    if pid not in _START:   # per pid: a forked child has its own start
        age = _linux_age() if sys.platform.startswith("linux") else None
        # the epoch clock read just after the boot clock: a preemption between them would move the start earlier
        now = time.time()
        if age is None:
            try:
                import psutil

                age = max(0.0, now - psutil.Process(pid).create_time())
            except Exception:   # noqa: BLE001 - no psutil, or it cannot tell: the best lower bound
                age = now - _IMPORTED_AT
        _START[pid] = now - age
    return _START[pid]


def pid_start(pid: int) -> float | None:
    """Epoch seconds when another process of this machine started (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    age = _linux_age(pid)
    return None if age is None else time.time() - age


def process_age() -> float:
    """Seconds since this process started."""
    return max(0.0, time.time() - process_start())


def mark_ready() -> float:
    """Record (the first time only) that this process is ready for tasks; seconds from its start to then."""
    pid = os.getpid()
    if pid not in _READY:
        _READY[pid] = process_age()
    return _READY[pid]


def note_phase(phase: str, seconds: float) -> None:
    """Time spent in ``phase`` by code outside the timeline (e.g. MPI init inside an import)."""
    notes = _NOTES.setdefault(os.getpid(), {})
    notes[phase] = notes.get(phase, 0.0) + max(0.0, seconds)


def slow_start_for_tests(rank: int | None = None) -> None:
    """Sleep as ``TRAJSCALE_TEST_SLOW_START`` asks (module docstring); a no-op without it."""
    spec = os.environ.get("TRAJSCALE_TEST_SLOW_START")
    if not spec:
        return
    seconds, _, who = spec.partition(":")
    if who == "one":
        token = os.environ.get("TRAJSCALE_TEST_SLOW_START_TOKEN")
        if rank is not None or not token:
            return
        try:   # the first worker to create the token sleeps
            os.close(os.open(token, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    elif who and (rank is None or int(who) != rank):
        return
    time.sleep(float(seconds))


def runs_start_at_call() -> None:
    """Time this process's next runs from their call, not its start (for a process that did other work first)."""
    _TIMED_RUNS.add(os.getpid())


class ProcessTimeline:
    """Consecutive phases of the launching process, each ending where the next begins.

    The first run in a process starts at the process's start (its ``imports`` phase holds the
    interpreter's start); a later run in the same process starts when it is called.
    """

    def __init__(self) -> None:
        pid = os.getpid()
        now = time.time()
        first = pid not in _TIMED_RUNS
        _TIMED_RUNS.add(pid)
        self.origin = "process start" if first else "run start"
        self.t_begin = process_start() if first else now
        self.t_end = self.t_begin
        self.phases = dict.fromkeys(PROCESS_PHASES, 0.0)
        if not first:   # notes from an earlier run's time belong to it
            _NOTES.pop(pid, None)
        self.lap("imports")

    def lap(self, phase: str) -> float:
        """The time since the last lap goes to ``phase`` (less what was noted for other phases)."""
        now = time.time()
        dt = now - self.t_end
        for name, s in (_NOTES.pop(os.getpid(), None) or {}).items():
            s = min(s, dt)
            self.phases[name] += s
            dt -= s
        self.phases[phase] += max(0.0, dt)
        self.t_end = now
        return dt

    def move(self, seconds: float, source: str, target: str) -> None:
        """Move ``seconds`` (measured inside ``source``) to ``target``."""
        s = min(max(0.0, seconds), self.phases[source])
        self.phases[source] -= s
        self.phases[target] += s

    def record(self) -> dict:
        """The report's ``process`` record (plain values)."""
        from .util import host_name

        cpus, affinity = cpu_facts()
        return {"t_wall": self.t_end - self.t_begin, "phases": dict(self.phases), "origin": self.origin,
                "t_begin": self.t_begin, "t_end": self.t_end, "pid": os.getpid(),
                "host": host_name(), "cpus": cpus, "affinity": affinity}


def cpu_facts(pid: int = 0) -> tuple[int, str]:
    """``(cpus, affinity)`` of process ``pid``: its host's CPUs and those it may run on (``"0-3,8"``)."""
    cpus = os.cpu_count() or 0
    try:
        allowed = sorted(os.sched_getaffinity(pid))
    except (AttributeError, OSError):   # not Linux, or the process is gone
        allowed = list(range(cpus))
    return cpus, cpu_list(allowed)


def cpu_list(cpus) -> str:
    """CPU numbers as Linux lists them: ``[0, 1, 2, 3, 8]`` -> ``"0-3,8"``."""
    nums = sorted({int(c) for c in cpus})
    runs = [[c for _, c in g] for _, g in itertools.groupby(enumerate(nums), lambda ic: ic[1] - ic[0])]
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def parse_cpu_list(text: str) -> set[int]:
    """``"0-3,8"`` -> ``{0, 1, 2, 3, 8}`` (an empty string: no CPUs known)."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def extend_record(record: dict, phase: str) -> None:
    """Add the time from the record's end to now to ``phase`` (e.g. writing results after the run)."""
    if not record or "t_end" not in record:
        return
    now = time.time()
    dt = max(0.0, now - float(record["t_end"]))
    record["phases"][phase] = record["phases"].get(phase, 0.0) + dt
    record["t_wall"] = float(record["t_wall"]) + dt
    record["t_end"] = now


__all__ = ["PROCESS_PHASES", "PROCESS_PHASE_LABELS", "ProcessTimeline", "cpu_facts", "cpu_list", "extend_record",
           "mark_ready", "note_phase", "parse_cpu_list", "pid_start", "process_age", "process_start",
           "slow_start_for_tests"]
