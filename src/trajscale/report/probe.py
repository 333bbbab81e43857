"""Measure the storage that holds a path, and this machine's start-up costs: a profile for ``--predict``.

Within ``--seconds``: cold read bandwidth with 1, 2, 4 ... k readers (``O_DIRECT``, else ``POSIX_FADV_DONTNEED``),
open and stat latency, each executor's fresh worker start, and the cost per byte of a pickled transfer.  Under
``mpiexec -n K`` every rank reads its own part of one file: the storage as K ranks on several nodes see it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

from ..errors import ConfigError, InputFileError
from ..executor_registry import EXECUTORS
from ..launch import current as current_launch
from .conditions import LoadMeter
from .machine import MEASURED, Machine, this_machine

#: The block one read asks for: a slab of frames of a ~50,000-atom system in float32 (4 MiB).
BLOCK_BYTES = 4 * 2**20
#: A dropped read must be this much slower than a cached one for the probe to call it cold.
COLD_FACTOR = 1.3
#: Small files timed for open and stat latency.
META_FILES = 32
#: What a fresh worker of each executor imports before its first task (the executors' own declarations).
WORKER_IMPORTS = {t.name: t.worker_imports for t in EXECUTORS.values() if t.worker_imports}
#: The array sent to a worker process and back to time a transfer, and the rounds timed.
TRANSFER_BYTES, TRANSFER_ROUNDS = 16 * 2**20, 3


@dataclass(frozen=True, slots=True)
class ProbeOptions:
    """What ``trajscale probe`` was asked for."""

    path: str
    seconds: float = 20.0
    nbytes: int = 256 * 2**20
    max_readers: int = 0          # 0: twice the cores, at most 16 (under MPI: the ranks)
    block_bytes: int = BLOCK_BYTES
    starts: bool = True           # time the executors' worker starts


def _drop_cache(path: str, offset: int = 0, length: int = 0) -> bool:
    """Ask the kernel to drop ``path``'s cached pages; False where it cannot be asked."""
    if not hasattr(os, "posix_fadvise"):
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _read_range(path: str, offset: int, length: int, block: int, deadline: float,
                direct: bool = False) -> tuple[int, float, float]:
    """Read ``length`` bytes from ``offset`` in blocks until done or ``deadline``: (bytes, t0, t1); one block at
    least, so a late reader still measures a rate.  ``direct``: O_DIRECT into a page-aligned buffer."""
    import mmap

    buf = mmap.mmap(-1, block)   # page-aligned, as O_DIRECT needs
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if direct else 0))
    got = 0
    try:
        t0 = time.time()
        while got < length and (not got or time.time() < deadline):
            n = os.preadv(fd, [buf], offset + got)
            if not n:
                break
            got += min(n, length - got)
        return got, t0, time.time()
    finally:
        os.close(fd)
        buf.close()


def direct_reads_work(path: str, block: int) -> bool:
    """True if ``path`` can be read with O_DIRECT here (not on tmpfs, nor where the OS lacks it)."""
    if not hasattr(os, "O_DIRECT"):
        return False
    try:
        return _read_range(path, 0, block, block, time.time() + 5.0, direct=True)[0] > 0
    except OSError:
        return False


def _reader(path, offset, length, block, seconds, direct, barrier, queue) -> None:
    barrier.wait()   # every reader started: their time counts from here (a start on a loaded machine is slow)
    queue.put(_read_range(path, offset, length, block, time.time() + seconds, direct))


def _concurrent_read(path: str, size: int, k: int, block: int, seconds: float, cold: bool,
                     direct: bool = False) -> tuple[float, int]:
    """Aggregate bytes/s of ``k`` processes reading disjoint parts of ``path`` at once, and the bytes read."""
    if cold and not direct:
        _drop_cache(path)
    from ..pools import worker_context

    ctx = worker_context()   # fork only where this process may
    part = (size // k) // block * block or size // k
    barrier, queue = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=_reader, daemon=True,
                         args=(path, i * part, part, block, seconds, direct, barrier, queue))
             for i in range(k)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    got = sum(r[0] for r in results)
    span = max(r[2] for r in results) - min(r[1] for r in results)
    return (got / span if span > 0 else 0.0), got


def _write_file(folder: Path, nbytes: int) -> str:
    """A file of ``nbytes`` incompressible bytes in ``folder``, synced to the storage."""
    block = os.urandom(2**20)
    fd, name = tempfile.mkstemp(prefix=".trajscale-probe-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            left = nbytes
            while left > 0:
                f.write(block[:min(left, len(block))])
                left -= len(block)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        Path(name).unlink(missing_ok=True)
        raise InputFileError(str(folder), f"cannot write a probe file there ({exc.strerror or exc})") from None
    return name


def _metadata_latency(folder: Path) -> tuple[float, float]:
    """Median ms of one open+close and of one stat, over small files made in ``folder``."""
    with tempfile.TemporaryDirectory(prefix=".trajscale-probe-", dir=folder) as tmp:
        names = [os.path.join(tmp, f"f{i}") for i in range(META_FILES)]
        for n in names:
            Path(n).write_bytes(b"x")
        opens, stats = [], []
        for n in names:
            t0 = time.perf_counter()
            os.close(os.open(n, os.O_RDONLY))
            t1 = time.perf_counter()
            os.stat(n)
            stats.append(time.perf_counter() - t1)
            opens.append(t1 - t0)
    return median(opens) * 1e3, median(stats) * 1e3


def worker_starts(budget: float) -> dict[str, float]:
    """Seconds a fresh interpreter takes to import what each executor's worker imports (those installed)."""
    out = {}
    for name, code in WORKER_IMPORTS.items():
        if budget <= 0:
            break
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=max(5.0, budget),
                                  env=dict(os.environ, OMP_NUM_THREADS="1"), check=False)
        except subprocess.TimeoutExpired:
            break
        dt = time.perf_counter() - t0
        budget -= dt
        if proc.returncode == 0:
            out[name] = dt
    return out


def _echo(conn) -> None:
    """A worker process that sends back what it receives (until None)."""
    while (obj := conn.recv()) is not None:
        conn.send(obj)


def transfer_s_per_byte(nbytes: int = TRANSFER_BYTES, rounds: int = TRANSFER_ROUNDS) -> float:
    """Seconds per byte of moving a pickled array to a worker process, through a pipe as a process pool
    sends a task (pickle, write, read, unpickle): half the median round trip over the bytes."""
    import numpy as np

    from ..pools import worker_context

    ctx = worker_context()
    ours, theirs = ctx.Pipe()
    worker = ctx.Process(target=_echo, args=(theirs,), daemon=True)
    worker.start()
    try:
        data = np.ones(max(1, nbytes // 8))
        ours.send(data[:1])   # the worker is up and has imported NumPy before the clock starts
        ours.recv()
        times = []
        for _ in range(max(1, rounds)):
            t0 = time.perf_counter()
            ours.send(data)
            ours.recv()
            times.append(time.perf_counter() - t0)
        ours.send(None)
    finally:
        worker.join(timeout=10)
        if worker.is_alive():
            worker.kill()
    return median(times) / (2 * data.nbytes)


def _levels(k: int) -> list[int]:
    out, n = [], 1
    while n < k:
        out.append(n)
        n *= 2
    return [*out, k]


def _target(opts: ProbeOptions) -> tuple[Path, str | None]:
    """(folder, existing file to read or None)."""
    p = Path(opts.path)
    if p.is_dir():
        return p, None
    if p.is_file():
        return p.parent, str(p)
    raise InputFileError(opts.path, "no such file or folder")


def probe(opts: ProbeOptions, log=print) -> Machine:
    """Measure this machine and the storage holding ``opts.path`` (one process; see :func:`probe_mpi`)."""
    if opts.seconds <= 0 or opts.nbytes < opts.block_bytes:
        raise ConfigError(f"--seconds must be > 0 and --bytes at least one block ({opts.block_bytes} bytes)")
    folder, existing = _target(opts)
    # the readers, the starts and whatever they leave behind are its own: other work is the rest
    with LoadMeter("probe", adopt=True) as meter:
        here = this_machine()
        k = opts.max_readers or min(16, 2 * here.cores)
        levels = _levels(k)
        start_budget = 0.3 * opts.seconds if opts.starts else 0.0
        per_level = max(0.05, (opts.seconds - start_budget) / (len(levels) + 2))
        path = existing or _write_file(folder, opts.nbytes)
        try:
            size = min(os.path.getsize(path), opts.nbytes)
            if size < opts.block_bytes:
                raise InputFileError(path, f"too small to probe ({size} bytes; one block is {opts.block_bytes})")
            warm_pass = _concurrent_read(path, size, 1, opts.block_bytes, per_level, cold=False)[0]
            warm = _concurrent_read(path, size, 1, opts.block_bytes, per_level, cold=False)[0]
            direct = direct_reads_work(path, opts.block_bytes)
            dropped = direct or _drop_cache(path)
            cold1 = _concurrent_read(path, size, 1, opts.block_bytes, per_level, cold=True, direct=direct)[0] \
                if dropped else warm
            cold_note, cold = _cold_note(warm, cold1, dropped, direct)
            log(f"probe: {size / 2**20:.0f} MiB at {path}: one reader {cold1 / 1e9:.3g} GB/s "
                f"({'cold' if cold else 'cache state not told'}), page cache {max(warm, warm_pass) / 1e9:.3g} GB/s")
            curve = [(1, cold1)]
            for n in levels[1:]:
                rate, _ = _concurrent_read(path, size, n, opts.block_bytes, per_level, cold=cold,
                                           direct=direct and cold)
                curve.append((n, rate))
                log(f"probe: {n} readers {rate / 1e9:.3g} GB/s")
            open_ms, stat_ms = _metadata_latency(folder)
            log(f"probe: open {open_ms:.3g} ms, stat {stat_ms:.3g} ms")
        finally:
            if existing is None:
                Path(path).unlink(missing_ok=True)
        starts = worker_starts(start_budget) if opts.starts else {}
        for name, s in starts.items():
            log(f"probe: a fresh {name} worker starts in {s:.3g} s")
        transfer = transfer_s_per_byte() if opts.starts else None
        if transfer is not None:
            log(f"probe: a pickled object moves to a worker process at {1e-9 / transfer:.3g} GB/s")
    load = meter.result
    if load is not None:
        log(f"probe: {'BUSY ' if load.busy else ''}{load.describe()}")
    origin = _origin(here, folder, bool(starts), transfer is not None, load is not None)
    return replace(here, read_curve=tuple(curve), block_bytes=opts.block_bytes, cold=cold_note,
                   cached_read_bps=max(warm, warm_pass) or None, open_ms=open_ms, stat_ms=stat_ms,
                   start_s=tuple(starts.items()), transfer_s_per_byte=transfer,
                   loads=(load,) if load is not None else (), origin=tuple(origin.items()))


def _cold_note(warm: float, cold1: float, dropped: bool, direct: bool) -> tuple[str, bool]:
    """How the probe's reads bypassed the page cache (and both rates), and whether cold was told from cached."""
    how = "O_DIRECT reads" if direct else "posix_fadvise(DONTNEED) before each level"
    if dropped and warm > COLD_FACTOR * cold1:
        return f"cold: {how}; page cache {warm / 1e9:.3g} GB/s, cold {cold1 / 1e9:.3g} GB/s", True
    why = "dropping the cache had no visible effect" if dropped else "posix_fadvise is not available"
    return (f"could not tell cold from page-cache reads ({why}: {warm / 1e9:.3g} against "
            f"{cold1 / 1e9:.3g} GB/s); the curve may be the page cache's"), False


def _origin(here: Machine, folder: Path, starts: bool, transfer: bool, load: bool) -> dict[str, str]:
    """Where each of the profile's values came from."""
    by = f"{MEASURED} by trajscale probe on {here.name}"
    origin = dict(here.origin)
    origin.update(dict.fromkeys(("read_curve", "open_ms", "stat_ms", "block_bytes", "cold", "cached_read_bps"),
                                f"{by} at {folder}"))
    origin.update({k: by for k, measured in (("start_s", starts), ("transfer_s_per_byte", transfer),
                                             ("loads", load)) if measured})
    return origin


def under_mpi() -> bool:
    """True when this process is one of several ranks that MPI joins (the probe then measures on all of them)."""
    launch = current_launch()
    return launch.several and launch.mpi_sees


def _mpi_file(opts: ProbeOptions) -> tuple[Path, str | None, str]:
    """(folder, existing file or None, the file the ranks read): the MPI probe's checks and file, on rank 0."""
    if opts.seconds <= 0 or opts.nbytes < opts.block_bytes:
        raise ConfigError(f"--seconds must be > 0 and --bytes at least one block ({opts.block_bytes} bytes)")
    folder, existing = _target(opts)
    if existing is not None and os.path.getsize(existing) < opts.block_bytes:
        raise InputFileError(existing, f"too small to probe ({os.path.getsize(existing)} bytes; "
                                       f"one block is {opts.block_bytes})")
    return folder, existing, existing or _write_file(folder, opts.nbytes)


def probe_mpi(opts: ProbeOptions, log=print) -> Machine | None:
    """The probe on every rank of MPI_COMM_WORLD over one file rank 0 writes; the profile on rank 0, None elsewhere."""
    from mpi4py import MPI

    from ..sharing import share_on_comm

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    # rank 0 checks the path and writes the file; its error (a missing folder) ends every rank alike
    folder, existing, path = share_on_comm(comm, lambda: _mpi_file(opts), "prepare the probe's file")
    meter = LoadMeter("probe")
    here = this_machine()
    hosts = comm.gather((socket.gethostname(), here.cores_per_node, here.threads_per_core, here.memory_bytes),
                        root=0)
    try:
        fsize = min(os.path.getsize(path), opts.nbytes)
        direct = all(comm.allgather(direct_reads_work(path, opts.block_bytes)))
        levels = _levels(min(size, opts.max_readers or size))
        per_level = max(0.05, opts.seconds / (len(levels) + 1))
        curve = []
        for k in levels:
            part = (fsize // k) // opts.block_bytes * opts.block_bytes or fsize // k
            if rank < k and not direct:
                _drop_cache(path, rank * part, part)
            comm.Barrier()
            got, t0, t1 = (_read_range(path, rank * part, part, opts.block_bytes, time.time() + per_level, direct)
                           if rank < k else (0, 0.0, 0.0))
            rows = comm.gather((got, t0, t1), root=0)
            if rank == 0:
                busy = [r for r in rows if r[0]]
                span = max(r[2] for r in busy) - min(r[1] for r in busy)
                curve.append((k, sum(r[0] for r in busy) / span if span > 0 else 0.0))
                log(f"probe: {k} ranks {curve[-1][1] / 1e9:.3g} GB/s")
        comm.Barrier()
    finally:
        if rank == 0 and existing is None:
            Path(path).unlink(missing_ok=True)
    # the ranks on rank 0's host are the probe's own work there, though not its children
    cpu = comm.gather((socket.gethostname(), meter.own_so_far()), root=0)
    if rank != 0:
        return None
    load = meter.stop(sum(s for h, s in cpu[1:] if h == cpu[0][0]))
    open_ms, stat_ms = _metadata_latency(folder)
    names = sorted({h[0] for h in hosts})
    where = f"{MEASURED} by trajscale probe under MPI on {len(names)} node(s) at {folder}"
    origin = {k: where for k in ("name", "nodes", "cores_per_node", "threads_per_core", "memory_bytes",
                                 "read_curve", "open_ms", "stat_ms", "block_bytes", "cold", "loads")}
    return Machine(name=",".join(names), nodes=len(names), cores_per_node=min(h[1] for h in hosts),
                   threads_per_core=max(h[2] for h in hosts), memory_bytes=min(h[3] for h in hosts),
                   read_curve=tuple(curve), block_bytes=opts.block_bytes,
                   cold="cold: O_DIRECT reads on every rank" if direct else
                   "cold: each rank dropped its part with posix_fadvise(DONTNEED) before each level",
                   open_ms=open_ms, stat_ms=stat_ms, loads=(load,) if load is not None else (),
                   origin=tuple(origin.items()))


__all__ = ["BLOCK_BYTES", "ProbeOptions", "probe", "probe_mpi", "under_mpi", "worker_starts"]
