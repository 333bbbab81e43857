"""SPMD execution under ``mpiexec``/``srun``: every rank reads its own frames.

There is no master/worker split. Rank 0 alone loads the topology and prepares the Job (``trajscale.run`` does that);
:meth:`MPIExecutor.broadcast` hands it to every rank. All ranks compute the same task list; rank ``r`` runs the
contiguous group of tasks ``[ceil(r*k/N), ceil((r+1)*k/N))``, so it reads one contiguous region of the file.
Per-frame partials come home to rank 0 with ``Gatherv`` of raw NumPy buffers (no pickles), in frame order;
accumulating partials are reduced on each rank, gathered and reduced again on rank 0.

An exception on any rank prints one line naming the rank and its frames and aborts the whole job (``MPI_Abort``): a
rank waiting in a collective never hangs. A stop signal is not a failure: SIGTERM (``scancel``, a time limit) or
Ctrl-C is recorded on the rank it reaches, each rank ends its tasks at the next task boundary, and the ranks agree on
it in the collective that ends the tasks; every rank then exits as a signalled command does (143 for SIGTERM), with
no abort. A server's outage (:class:`~trajscale.errors.ServerUnreachable`) is shared the same way: the rank that
meets it stops its tasks, and every rank ends with it once the others have met it too or ended theirs. Before the
job is shared, rank 0 owes the other ranks that share (:func:`trajscale.sharing.owe_first_share`): a stop signal
while it prepares is what it shares.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import sys
import time

import numpy as np

from ..analysis.base import FrameRows, analysis_from_config
from ..block import FrameRange
from ..errors import ConfigError, ServerUnreachable
from ..parallel import (
    check_mpi_world,
    default_mpi_driver,
    mpi_comm_world,
    require_parallel_h5py,
    wait_asleep,
    when_all_arrive,
)
from ..progress import progress_bar
from ..report.timing import host_and_pid
from ..sharing import owe_first_share, share_settled
from ..timeline import cpu_facts, mark_ready, process_start, slow_start_for_tests
from ..util import polling_for_stop, stop_requested
from .base import Executor, Fold, Job, TaskResults, cached_source, close_cached_sources, io_of, opened_files, run_task

log = logging.getLogger(__name__)

_DRIVERS = ("auto", "mpio", None)


def rank_tasks(n_tasks: int, size: int, rank: int) -> range:
    """Task indices of ``rank``: ``[ceil(rank*k/N), ceil((rank+1)*k/N))``; rounding up puts idle ranks last,
    so rank 0 always holds the first task."""
    return range(-(-rank * n_tasks // size), -(-(rank + 1) * n_tasks // size))


class MPIExecutor(Executor):
    """Run tasks SPMD on the ranks of an MPI communicator.

    Parameters
    ----------
    n_workers
        Ignored: the number of workers is the communicator's size.
    comm
        Communicator (default ``MPI.COMM_WORLD``).
    driver
        HDF5 driver for H5MD sources: ``"mpio"`` (parallel HDF5, every rank opens the file collectively), ``None``
        (HDF5's default driver, each rank opens the file read-only on its own) or ``"auto"`` (``"mpio"`` where h5py
        is built with MPI).
    collective
        Collective MPI-IO reads (``driver="mpio"`` only).
    """

    root_worker = "rank 0"
    spmd = True

    def __init__(self, n_workers: int | None = None, comm=None, driver: str | None = "auto",
                 collective: bool = False) -> None:
        if driver not in _DRIVERS:
            raise ConfigError(f"MPI executor: driver must be 'mpio', None or 'auto', got {driver!r}")
        self.comm = comm if comm is not None else mpi_comm_world()
        if comm is None:   # a launcher of another MPI starts N singleton worlds: refuse
            check_mpi_world(self.comm.Get_size())
        super().__init__(self.comm.Get_size())
        if n_workers not in (None, self.n_workers):
            log.debug("MPI executor: n_workers=%s ignored; the communicator has %d ranks",
                      n_workers, self.n_workers)
        if driver == "auto":
            driver = default_mpi_driver()
        elif driver == "mpio":
            require_parallel_h5py()
        self.driver = driver
        self.collective = bool(collective and driver == "mpio")
        if collective and driver != "mpio":
            log.warning("collective reads need driver='mpio'; reading independently")
        self.rank = self.comm.Get_rank()
        if self.n_workers > 1:   # the other ranks' first collective is the job's share: rank 0 owes it from now
            owe_first_share(self)
        from ..kernels import superpose  # noqa: F401 - the kernels now, as a pool's workers do, not in a task
        slow_start_for_tests(self.rank)   # TRAJSCALE_TEST_SLOW_START: a slow-starting rank, for the report's tests
        self._t_start = mark_ready()   # this rank's start-up: process start to ready for tasks
        self._t_bcast = 0.0   # waiting in the job's broadcast (ranks other than 0: rank 0's preparation)

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def broadcast(self, obj):
        """``obj`` from rank 0 to every rank, pickled once; a refusal to pickle is what the other ranks receive."""
        t0 = time.perf_counter()
        if self.rank == 0:
            try:
                data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                refused = ConfigError(f"the job cannot be sent to the other ranks: pickle cannot take it "
                                      f"({type(exc).__name__}: {exc}); an analysis's prepared state must hold "
                                      "plain values and NumPy arrays")
                when_all_arrive(self.comm, self.comm.bcast, pickle.dumps(refused), root=0)
                raise refused from None
            when_all_arrive(self.comm, self.comm.bcast, data, root=0)
            return obj
        out = pickle.loads(when_all_arrive(self.comm, self.comm.bcast, None, root=0))
        self._t_bcast += time.perf_counter() - t0
        return out

    @property
    def source_options(self) -> dict:
        if self.driver == "mpio":
            return {"driver": "mpio", "collective": self.collective}
        return {"driver": None, "collective": False}

    def map_tasks(self, job: Job, ranges: list[FrameRange], progress: bool = False) -> TaskResults | None:
        """Run this rank's tasks; on rank 0 every task's timing and the ranks' reduced partials, in frame order."""
        comm, rank, size = self.comm, self.rank, self.comm.Get_size()
        share_settled(self)   # (run without a share first: the ranks' collectives are now the tasks')
        mine = rank_tasks(len(ranges), size, rank)
        job = self._check_collective(job, ranges)
        host, pid = host_and_pid()
        self._current = _span(ranges, mine)   # what an abort names
        t_bcast, self._t_bcast = self._t_bcast, 0.0   # this run's wait for the job
        signum, outage = 0, None
        # A stop signal is acted on by every rank together once each has ended its tasks: none is left in a collective
        with polling_for_stop():
            try:
                analysis = analysis_from_config(job.analysis)
                # Every rank opens the file, even one without tasks: with "mpio" the open and close are collective.
                src, t_init_traj = cached_source(job.source, comm)
                files = opened_files(job.source, src, 0, t_init_traj > 0) if src.opened is None else ()
                span = _span(ranges, mine)
                if span is not None:
                    src.preload_frame_meta(span.start, span.stop)   # this rank's frames only, not N full reads
                progress = comm.bcast(bool(progress), root=0)   # rank 0 decides; every rank must agree
                with _RankProgress(comm, len(ranges), progress) as bar:
                    partials, timings, outage = self._tasks(job, ranges, mine, Fold(analysis), bar)
                    self._current = _span(ranges, mine)
                    local = analysis.reduce(partials.partials())
                    t0 = time.perf_counter()
                    # the wait for the slowest rank (t_wait), and whether a stop was recorded on any rank
                    states = when_all_arrive(comm, comm.allgather, (stop_requested(), len(timings), outage))
                    t1 = time.perf_counter()
                    signum = max(s for s, _, _ in states)
                    outage = next((o for _, _, o in states if o is not None), None)
                    bar.expect(sum(n for _, n, _ in states))
                if not signum and outage is None:
                    partials, all_timings, all_extras = self._gather(analysis, local, timings, t1, {
                        "host": host, "pid": pid, "t_init_traj": t_init_traj, "t_wait": t1 - t0 + t_bcast,
                        "files_opened": files, "collective": src.collective})
                close_cached_sources()   # collective under mpio: every rank gets here
            except BaseException as exc:   # noqa: BLE001 - any failure must end the whole job
                self._abort(rank, self._current, exc)
        if signum:   # every rank ends as a signalled command does (128 + the signal); a finished run keeps nothing
            raise SystemExit(128 + signum)
        if outage is not None:   # every rank ends with the first outage seen; rank 0 says it
            outage.reported_elsewhere = rank != 0
            raise outage
        if rank != 0:
            return None
        return TaskResults(tuple(partials), tuple(t for ts in all_timings for t in ts), dict(all_extras),
                           io_of(self.source_options, collective=all(e["collective"] for _, e in all_extras)))

    def _tasks(self, job: Job, ranges: list[FrameRange], mine: list[int], partials: Fold, bar) -> tuple:
        """This rank's tasks in order, reduced as they end, until a stop is recorded or the server's outage is
        met: (partials, timings, the outage or None); an outage is shared as a stop is, never an abort."""
        timings, worker = [], f"rank {self.rank}"
        for k, i in enumerate(mine):
            if stop_requested():
                break
            self._current = ranges[i]
            # a rank knows its next task: a source behind a URL fetches its first block meanwhile
            then = ranges[mine[k + 1]] if k + 1 < len(mine) else None
            try:
                done = run_task(job, i, ranges[i], worker, self.comm, then=then)
            except ServerUnreachable as exc:
                return partials, timings, exc
            except SystemExit:   # a stop signal ended the task: this rank stops with the others
                if not stop_requested():
                    raise
                break
            partials.add(done[0])
            timings.append(done[1])
            bar.task_done()
        return partials, timings, None

    def _gather(self, analysis, local, timings: list, t_gathered: float, facts: dict) -> tuple:
        """The ranks' partials, task timings and facts on rank 0 (None elsewhere); ``facts`` gains this rank's
        CPUs, start-up and ``t_comm``, from ``t_gathered`` through the gathers."""
        comm = self.comm
        if analysis.per_frame:
            partials = [self._gather_per_frame(local)]
        else:
            partials = [p for p in comm.gather(local, root=0) or () if p]
        all_timings = comm.gather(timings, root=0)
        t_comm = time.perf_counter() - t_gathered
        cpus, affinity = cpu_facts()
        extras = {**facts, "cpus": cpus, "affinity": affinity, "t_comm": t_comm, "t_start": self._t_start,
                  "t_ready": process_start() + self._t_start}
        return partials, all_timings, comm.gather((f"rank {self.rank}", extras), root=0)

    def _check_collective(self, job: Job, ranges: list[FrameRange]) -> Job:
        """Collective reads need the same number of reads on every rank, each task one block; else independent reads."""
        if not job.source.get("collective"):
            return job
        size = self.comm.Get_size()
        if len(ranges) % size == 0 and all(len(r) <= job.block_frames for r in ranges):
            return job
        if self.rank == 0:
            log.warning("collective reads need a multiple of %d tasks of one block each (got %d): "
                        "reading independently", size, len(ranges))
        return dataclasses.replace(job, source={**job.source, "collective": False})

    def _gather_per_frame(self, partial) -> FrameRows | None:
        """Gatherv each per-frame array to rank 0 as raw bytes, in rank (= frame) order."""
        from mpi4py import MPI

        comm = self.comm
        local = FrameRows.of(partial).to_dict() if partial else {}
        rows = len(local["frame"]) if local else 0
        layout = {k: (v.dtype.str, v.shape[1:]) for k, v in local.items()} if local else None
        meta = comm.allgather((rows, layout))
        counts_rows = [m[0] for m in meta]
        layout = next((m[1] for m in meta if m[1] is not None), None)
        if layout is None:   # no frames anywhere
            return FrameRows.empty() if self.rank == 0 else None
        out: dict[str, np.ndarray] = {}
        for key in sorted(layout):
            dtype, trail = np.dtype(layout[key][0]), tuple(layout[key][1])
            row_bytes = dtype.itemsize * int(np.prod(trail, dtype=np.int64))
            send = np.ascontiguousarray(local[key], dtype=dtype) if rows else np.empty((0, *trail), dtype)
            counts = [r * row_bytes for r in counts_rows]
            if self.rank == 0:
                recv = np.empty((sum(counts_rows), *trail), dtype=dtype)
                displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
                comm.Gatherv([send.view(np.uint8).reshape(-1), MPI.BYTE],
                             [recv.view(np.uint8).reshape(-1), counts, displs, MPI.BYTE], root=0)
                out[key] = recv
            else:
                comm.Gatherv([send.view(np.uint8).reshape(-1), MPI.BYTE], None, root=0)
        return FrameRows.of(out) if self.rank == 0 else None

    def _abort(self, rank: int, frames: FrameRange | None, exc: BaseException) -> None:
        """Say which rank failed on which frames, then abort every rank of the job."""
        where = f"frames [{frames.start}, {frames.stop})" if frames is not None else "no frames"
        cause = getattr(exc, "cause", None) or f"{type(exc).__name__}: {exc}"
        # Written directly: the process is about to be killed, and logging handlers may be buffered or absent.
        sys.stderr.write(f"trajscale: rank {rank} failed on {where}: {cause}; aborting all ranks\n")
        sys.stderr.flush()
        log.debug("rank %d failure", rank, exc_info=exc)
        from mpi4py import MPI

        time.sleep(0.5)   # let mpiexec forward that line: Abort kills the job's I/O proxies too
        MPI.COMM_WORLD.Abort(1)

    def close(self, wait: bool = True) -> None:
        """Close this process's cached sources (collective under ``mpio``: call on every rank)."""
        close_cached_sources()


class _RankProgress:
    """One progress display on rank 0 counting every rank's tasks (a small message per finished task)."""

    TAG = 7301

    def __init__(self, comm, total: int, enabled: bool) -> None:
        self.comm, self.total, self.enabled = comm, total, enabled
        self.rank = comm.Get_rank()
        self._requests: list = []
        self._done = 0
        self._bar = progress_bar(total, enabled, desc="tasks (all ranks)") if self.rank == 0 else None

    def __enter__(self) -> _RankProgress:
        return self

    def task_done(self) -> None:
        if not self.enabled:
            return
        if self.rank != 0:
            self._requests.append(self.comm.isend(1, dest=0, tag=self.TAG))
            return
        self._count(1 + self._drain(block=False))

    def expect(self, done: int) -> None:
        """The tasks every rank has finished: rank 0 waits for as many messages as were sent, no more."""
        self.total = min(self.total, done)

    def _count(self, n: int) -> None:
        self._done += n
        self._bar.update(n)

    def _drain(self, block: bool) -> int:
        """The messages waiting; ``block``: at least one, waited for asleep (a blocking receive spins a core)."""
        if block:
            wait_asleep(lambda: self.comm.iprobe(tag=self.TAG))
        n = 0
        while self.comm.iprobe(tag=self.TAG):
            self.comm.recv(tag=self.TAG)
            n += 1
        return n

    def __exit__(self, exc_type, *exc) -> None:
        if self.enabled and exc_type is None:
            if self.rank == 0:
                while self._done < self.total:   # the other ranks' remaining tasks
                    self._count(self._drain(block=True))
            else:
                from mpi4py import MPI

                MPI.Request.Waitall(self._requests)
        if self._bar is not None:
            self._bar.__exit__(exc_type, *exc)


def _span(ranges: list[FrameRange], tasks: range) -> FrameRange | None:
    """The frame range covered by a contiguous group of tasks (None if empty)."""
    if not len(tasks):
        return None
    return FrameRange(ranges[tasks[0]].start, ranges[tasks[-1]].stop)
