"""MDAnalysis ``BackendBase`` adapters: MDAnalysis analyses on MPI ranks or a Dask cluster.

MDAnalysis (2.8+) runs each part's ``_compute`` and merges the parts with the analysis's aggregator; these
backends decide where the parts run and time them into a RunReport (``.report``).
"""

from __future__ import annotations

import logging
import pickle
import time

import cloudpickle
import numpy as np
from MDAnalysis.analysis.backends import BackendBase

from ..facts import LayoutFacts
from ..parallel import when_all_arrive
from ..report.runfacts import RunFacts
from ..report.summary import Report
from ..report.timing import TaskTiming, host_and_pid, summarize_workers
from ..timeline import cpu_facts

log = logging.getLogger(__name__)


def _analysis_of(func):
    """The AnalysisBase whose ``_compute`` MDAnalysis passed in (a functools.partial of a bound method)."""
    bound = getattr(func, "func", func)
    return getattr(bound, "__self__", None)


def _frames_of(part) -> tuple[int, int]:
    idx = np.asarray(part).ravel()
    return (int(idx.min()), int(idx.max()) + 1) if idx.size else (0, 0)


def _timed(func, part, task: int, worker: str):
    """Run one part; return it pickled (its state right after this part) with its timing.

    cloudpickle writes the state, since a class made at run time (``analysis_class(func)``'s, a notebook's) has
    no importable name. ``_compute`` sets the frame attributes to the part's, so they are put back afterwards
    (in-process parts would leave them on the caller's object, which ``_conclude`` uses)."""
    host, pid = host_and_pid()
    analysis = _analysis_of(func)
    saved = dict(analysis.__dict__) if analysis is not None else None
    t_begin, t0 = time.time(), time.perf_counter()
    obj = func(part)
    blob = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    if saved is not None:
        analysis.__dict__.clear()
        analysis.__dict__.update(saved)
    start, stop = _frames_of(part)
    cpus, affinity = cpu_facts()
    return blob, TaskTiming(task=task, start=start, stop=stop, worker=worker, host=host, pid=pid,
                            t_compute=time.perf_counter() - t0, t_begin=t_begin, t_end=time.time(),
                            cpus=cpus, affinity=affinity)


def _report(func, executor: str, n_workers: int, timings: list[TaskTiming], t_total: float,
            extras: dict | None = None) -> Report:
    analysis = _analysis_of(func)
    n_frames = sum(t.frames for t in timings)
    atoms = getattr(getattr(analysis, "_trajectory", None), "n_atoms", 0)
    return Report(analysis=type(analysis).__name__ if analysis is not None else "mdanalysis",
                  executor=executor, n_workers=n_workers, n_frames=n_frames, n_atoms=int(atoms or 0),
                  source=LayoutFacts(format="mdanalysis", path=str(getattr(getattr(analysis, "_trajectory", None),
                                                                           "filename", ""))),
                  t_total=t_total, tasks=timings, workers=summarize_workers(timings, extras),
                  meta=RunFacts(backend="trajscale.mda", note="t_compute includes MDAnalysis's reads"))


class MPIBackend(BackendBase):
    """Parts of an MDAnalysis analysis on the ranks of an MPI communicator.

    Every rank runs the same script and calls ``run(backend=MPIBackend(), unsupported_backend=True)``; rank r
    computes the contiguous share r of the parts, all-gathered so every rank returns the merged result.

    Parameters
    ----------
    comm
        An mpi4py communicator (default ``MPI.COMM_WORLD``).
    """

    def __init__(self, comm=None) -> None:
        if comm is None:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        self.comm = comm
        self.report: Report | None = None
        super().__init__(n_workers=comm.Get_size())

    def apply(self, func, computations: list) -> list:
        from ..executors.mpi import rank_tasks

        t0 = time.perf_counter()
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        mine = rank_tasks(len(computations), size, rank)
        local = [(i, *_timed(func, computations[i], i, f"rank {rank}")) for i in mine]
        t1 = time.perf_counter()
        when_all_arrive(self.comm, self.comm.Barrier)
        t2 = time.perf_counter()
        gathered = self.comm.allgather(local)
        t3 = time.perf_counter()
        extras = self.comm.allgather((f"rank {rank}", {"t_wait": t2 - t1, "t_comm": t3 - t2}))
        parts = sorted((i, blob, timing) for rank_parts in gathered for i, blob, timing in rank_parts)
        self.report = _report(func, "mpi", size, [t for _, _, t in parts], time.perf_counter() - t0, dict(extras))
        analysis = _analysis_of(func)
        if analysis is not None:
            analysis.report = self.report
        return [pickle.loads(blob) for _, blob, _ in parts]


class DaskBackend(BackendBase):
    """Parts of an MDAnalysis analysis as tasks on a Dask ``distributed`` cluster.

    Parameters
    ----------
    client
        A ``distributed.Client``; default: an embedded ``LocalCluster`` of ``n_workers``
        single-threaded worker processes, started on first use and closed with :meth:`close`.
    n_workers
        Workers of the embedded cluster (ignored with a client: the cluster's size).
    """

    def __init__(self, client=None, n_workers: int = 2) -> None:
        self._client, self._cluster = client, None
        self.report: Report | None = None
        if client is not None:
            n_workers = max(1, len(client.scheduler_info().get("workers", {})) or n_workers)
        super().__init__(n_workers=int(n_workers))

    @property
    def client(self):
        if self._client is None:
            from ..clusters import dask_cluster

            # The one cluster factory: spawned workers never re-run the user's script (as trajscale.run's).
            self._cluster = dask_cluster(self.n_workers, silence_logs=logging.WARNING)
            self._client = self._cluster.client
        return self._client

    def apply(self, func, computations: list) -> list:
        t0 = time.perf_counter()
        futures = [self.client.submit(_dask_part, func, part, i, pure=False) for i, part in enumerate(computations)]
        done = self.client.gather(futures)
        self.report = _report(func, "dask", self.n_workers, [t for _, t in done], time.perf_counter() - t0)
        analysis = _analysis_of(func)
        if analysis is not None:
            analysis.report = self.report
        return [pickle.loads(blob) for blob, _ in done]

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._client = self._cluster = None

    def __enter__(self) -> DaskBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _dask_part(func, part, task: int):
    from distributed import get_worker

    return _timed(func, part, task, f"dask {get_worker().name}")
