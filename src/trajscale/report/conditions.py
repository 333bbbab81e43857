"""What a measurement shared its machine with, and whether a run's files were in the page cache.

:class:`Load` (:class:`LoadMeter`): the busy CPU time of this process's CPUs that was not ours, and steal.  Half a
core or more on average (:data:`BUSY_CORES`), or a tenth of a small machine's cores (:data:`BUSY_SHARE`), marks the
measurement busy: a run waits for its slowest worker, and a worker sharing its core takes up to twice as long.
:class:`PageCache` (:func:`page_cache`): the share of a run's files' pages cached at its start (``mincore``).
Both are Linux measurements; elsewhere they are recorded as not measured (None), never as zero."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

import numpy as np

#: Other work (and steal) taking this many cores on average, or this share of the cores' time (whichever is
#: less), marks a measurement as busy.
BUSY_CORES, BUSY_SHARE = 0.5, 0.10
#: ``mincore`` reads at most this many pages' states per file, past it in evenly spaced windows: a run's report
#: pays for every page it asks about, and 4,096 pages in 256 windows are far finer than :data:`WARM` needs.
MAX_PAGES = 1 << 12
#: Windows a large file's pages are sampled in.
WINDOWS = 256
#: Files whose pages are read at most (evenly spaced among a trajectory's parts); the rest are only sized.
MAX_FILES = 64
#: A file with this fraction of its pages resident (or more) was read from the page cache; with
#: ``1 - WARM`` or less, from the storage.
WARM = 0.9


@dataclass(frozen=True, slots=True)
class Load:
    """CPU time over one measured interval on the CPUs the measuring process may run on (seconds)."""

    what: str             # what was measured: "probe", "launch calibration", "run"
    wall_s: float
    cpus: int
    capacity_s: float     # the CPUs' whole time over the interval (busy, idle and steal)
    busy_s: float         # the CPUs' busy time (user, nice, system, irq, softirq)
    own_s: float          # the measuring process tree's CPU time
    steal_s: float
    load_start: float     # 1-minute load average at the start and at the end
    load_end: float

    @property
    def others_s(self) -> float:
        """CPU seconds of other work: the busy time that was not the process tree's."""
        return max(0.0, self.busy_s - self.own_s)

    @property
    def share(self) -> float:
        """Other work's and steal's share of the cores' time."""
        return (self.others_s + self.steal_s) / self.capacity_s if self.capacity_s > 0 else 0.0

    @property
    def others_cores(self) -> float:
        """Cores other work and steal took on average over the interval."""
        return (self.others_s + self.steal_s) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def busy(self) -> bool:
        return self.others_cores >= min(BUSY_CORES, BUSY_SHARE * self.cpus)

    def describe(self) -> str:
        """One line: how much of the cores other work took while this was measured."""
        cores = self.others_cores
        steal = f", steal {self.steal_s:.2g} s" if self.steal_s else ""
        return (f"{self.what}: other work took {cores:.2g} of {self.cpus} cores ({self.share:.0%}) over "
                f"{self.wall_s:.3g} s{steal}; load average {self.load_start:.2f} -> {self.load_end:.2f}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> Load:
        return cls(str(d["what"]), *(float(d[f.name]) if f.name != "cpus" else int(d[f.name])
                                     for f in fields(cls)[1:]))


def _cpu_ticks(cpus: set[int]) -> tuple[float, float, float] | None:
    """(busy, steal, all) seconds of ``cpus`` since boot, from their ``/proc/stat`` lines (None: not Linux)."""
    try:
        with open("/proc/stat") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy = steal = total = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        v = [int(x) for x in rest.split()][:8]   # user nice system idle iowait irq softirq steal
        v += [0] * (8 - len(v))
        busy += v[0] + v[1] + v[2] + v[5] + v[6]
        steal += v[7]
        total += sum(v)
    return (busy / hz, steal / hz, total / hz) if total else None


#: ``prctl`` options: orphaned descendants are reparented to the nearest subreaper ancestor instead of init.
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


def _subreaper(on: bool) -> bool | None:
    """Make this process the subreaper of its descendants (``on``) or not; the setting before (None: not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    was = ctypes.c_int(0)
    if prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) != 0:
        return None
    if prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        return None
    return bool(was.value)


def _reap_zombies(keep: set[int]) -> None:
    """Reap this process's exited children, except ``keep``; :func:`_own_cpu` counts their CPU time once either way."""
    for pid in _children(os.getpid()):
        if pid in keep or _stat(pid)[:1] != [b"Z"]:
            continue
        with contextlib.suppress(ChildProcessError):   # someone else here reaped it first
            os.waitpid(pid, os.WNOHANG)


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command's name, from the state on (none where unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return []
    return stat[stat.rindex(b")") + 2:].split()


def _own_cpu() -> float:
    """CPU seconds of this process, of the children it has waited for and of its live or exited descendants
    (a pool's workers, reaped by their forkserver only when the pool closes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + _live_descendants_cpu(os.getpid())


def _children(pid: int) -> list[int]:
    """Live children of ``pid`` (Linux's per-thread ``children`` lists; none where they cannot be read)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            continue
    return out


def _live_descendants_cpu(pid: int) -> float:
    """CPU seconds of ``pid``'s live descendants and of the children they have waited for."""
    hz = os.sysconf("SC_CLK_TCK")
    total = 0.0
    todo = _children(pid)
    seen: set[int] = set()
    while todo:
        child = todo.pop()
        if child in seen:
            continue
        seen.add(child)
        stat = _stat(child)
        if not stat:
            continue
        total += sum(int(x) for x in stat[11:15]) / hz   # utime stime cutime cstime
        todo.extend(_children(child))
    return total


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (every CPU where the OS cannot tell)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


class LoadMeter:
    """Measures :class:`Load` from its construction to :meth:`stop` (``with LoadMeter("probe") as m``).

    ``adopt``: every process started below this one meanwhile is its own work.  One whose parent exits first (a run's
    forkserver, its Dask workers) would be reparented to init and its CPU time lost, so the meter's process becomes
    their subreaper (``PR_SET_CHILD_SUBREAPER``) until :meth:`stop` reaps them and puts the setting back."""

    def __init__(self, what: str, adopt: bool = False) -> None:
        self.what = what
        self.cpus = allowed_cpus()
        # children that were here before are someone else's to wait for: never reaped by the meter
        self._keep = set(_children(os.getpid())) if adopt else set()
        self._was_subreaper = _subreaper(True) if adopt else None
        self.t0 = time.monotonic()
        self.own0 = _own_cpu()
        self.ticks0 = _cpu_ticks(self.cpus)
        self.load0 = _loadavg()
        self.result: Load | None = None

    def own_so_far(self) -> float:
        """CPU seconds of this process (and its waited-for children) since the meter started."""
        return _own_cpu() - self.own0

    def stop(self, also_ours_s: float = 0.0) -> Load | None:
        """The load so far (None: no ``/proc/stat``); ``also_ours_s``: CPU seconds of our non-children (MPI ranks)."""
        ticks = _cpu_ticks(self.cpus)
        own = _own_cpu() - self.own0 + max(0.0, also_ours_s)
        self._release()
        if ticks is None or self.ticks0 is None:
            return None
        busy, steal, total = (a - b for a, b in zip(ticks, self.ticks0, strict=True))
        self.result = Load(self.what, time.monotonic() - self.t0, len(self.cpus), total, busy, own, steal,
                           self.load0, _loadavg())
        return self.result

    def _release(self) -> None:
        """Reap the adopted processes that have exited and put the subreaper setting back (once)."""
        if self._was_subreaper is None:
            return
        _reap_zombies(self._keep)
        _subreaper(self._was_subreaper)
        self._was_subreaper = None

    def __enter__(self) -> LoadMeter:
        return self

    def __exit__(self, *exc) -> None:
        if self.result is None:
            self.stop()


def _loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan


def busy_reasons(loads) -> str:
    """The lines of the busy loads among ``loads`` joined ('' when none was busy)."""
    return "; ".join(x.describe() for x in loads if x is not None and x.busy)


@dataclass(frozen=True, slots=True)
class PageCache:
    """How much of a run's trajectory files was in the page cache at its start."""

    files: int
    bytes: int
    pages: int            # pages whose state was read
    resident: float       # fraction of those pages in the page cache
    sampled: bool         # windows of a larger file, not every page

    @property
    def case(self) -> str:
        """``cached``, ``cold`` or ``mixed`` (between :data:`WARM` and ``1 - WARM``)."""
        return "cached" if self.resident >= WARM else "cold" if self.resident <= 1 - WARM else "mixed"

    def describe(self) -> str:
        how = f"{self.pages} sampled pages" if self.sampled else f"all {self.pages} pages"
        return (f"{self.resident:.0%} of the {self.bytes / 1e9:.3g} GB of its {self.files} file(s) in the page "
                f"cache at its start (mincore, {how})")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> PageCache:
        return cls(int(d["files"]), int(d["bytes"]), int(d["pages"]), float(d["resident"]), bool(d["sampled"]))


@functools.lru_cache(maxsize=1)
def _libc():
    """libc's mmap, munmap and mincore (Linux), loaded once; not by ``find_library``, which runs ``ldconfig``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)   # the symbols this process already has: libc's among them
        libc.mincore   # noqa: B018 - raises AttributeError where it is missing
    except (OSError, AttributeError):
        return None
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    return libc


def _windows(pages: int, max_pages: int, windows: int) -> list[tuple[int, int]]:
    """(first page, pages) of the windows whose states are read: all pages, or evenly spaced windows."""
    if pages <= max_pages:
        return [(0, pages)]
    width = max(1, max_pages // windows)
    step = pages / windows
    return [(min(int(i * step), pages - width), width) for i in range(windows)]


def _resident_pages(libc, path: str, max_pages: int, windows: int) -> tuple[int, int, int, bool] | None:
    """(bytes, pages read, resident pages, sampled) of one file; None if it cannot be mapped."""
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, 0, 0, False
        addr = libc.mmap(None, size, 1, 1, fd, 0)   # PROT_READ, MAP_SHARED: maps, reads nothing
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            pages = -(-size // page)
            wins = _windows(pages, max_pages, windows)
            vec = (ctypes.c_ubyte * max(n for _, n in wins))()
            seen = resident = 0
            for first, n in wins:
                length = min(n * page, size - first * page)
                if libc.mincore(ctypes.c_void_p(addr + first * page), length, vec) != 0:
                    return None
                k = -(-length // page)
                seen += k
                resident += int(np.count_nonzero(np.frombuffer(vec, np.uint8, k) & 1))
            return size, seen, resident, len(wins) > 1
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)


def page_cache(paths, max_pages: int = MAX_PAGES, windows: int = WINDOWS) -> PageCache | None:
    """The page-cache state of ``paths`` now (None: not measurable), sampled within ``max_pages`` per file."""
    libc = _libc()
    if libc is None or not paths:
        return None
    paths = [os.fspath(p) for p in paths]
    step = max(1, -(-len(paths) // MAX_FILES))
    seen = resident = 0
    sampled = step > 1
    try:
        total = sum(os.path.getsize(p) for p in paths)
    except OSError:   # not files (a stream's address), or gone
        return None
    for p in paths[::step]:
        got = _resident_pages(libc, p, max_pages, windows)
        if got is None:
            return None
        seen, resident, sampled = seen + got[1], resident + got[2], sampled or got[3]
    if seen == 0:
        return None
    return PageCache(len(paths), total, seen, resident / seen, sampled)


@dataclass(frozen=True, slots=True)
class RunConditions:
    """A run report's ``conditions``: the machine's load while it ran, its files' page-cache state at its start."""

    load: Load | None = None
    page_cache: PageCache | None = None

    def to_dict(self) -> dict:
        return {"load": self.load.to_dict() if self.load else None,
                "page_cache": self.page_cache.to_dict() if self.page_cache else None}

    @classmethod
    def from_dict(cls, d: Mapping | None) -> RunConditions:
        """A report's record (an older report, or a field that cannot be read: not measured)."""
        d = d if isinstance(d, Mapping) else {}
        out = {}
        for name, kind in (("load", Load), ("page_cache", PageCache)):
            try:
                out[name] = kind.from_dict(d[name]) if isinstance(d.get(name), Mapping) else None
            except (KeyError, TypeError, ValueError):
                out[name] = None
        return cls(**out)


__all__ = ["BUSY_CORES", "BUSY_SHARE", "Load", "LoadMeter", "PageCache", "RunConditions", "WARM", "busy_reasons",
           "page_cache"]
