"""Run under ``mpiexec -n 2 python mpi_conformance.py BASETEMP``: each rank runs the conformance suite
on :class:`~trajscale.executors.mpi.MPIExecutor` with pytest, the ranks' collective calls in step
(each rank has its own pytest temporary folder; rank 0 writes the files both read)."""

from __future__ import annotations

import sys

import pytest

from trajscale.testing import ExecutorConformance


class TestMPI(ExecutorConformance):
    @classmethod
    def new_executor(cls):
        from trajscale.executors.mpi import MPIExecutor

        return MPIExecutor()


class _Summary:
    """Prints ``rank R: N passed, M skipped`` (what the driving test reads)."""

    def __init__(self, rank: int) -> None:
        self.rank, self.counts = rank, {"passed": 0, "skipped": 0, "failed": 0}

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "call" or report.skipped:
            self.counts[report.outcome] = self.counts.get(report.outcome, 0) + 1

    def pytest_sessionfinish(self) -> None:
        c = self.counts
        print(f"\nrank {self.rank}: {c['passed']} passed, {c['skipped']} skipped, {c['failed']} failed", flush=True)


if __name__ == "__main__":
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    code = pytest.main([__file__, "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                        f"--basetemp={sys.argv[1]}/rank{rank}", "-o", "addopts="], plugins=[_Summary(rank)])
    sys.exit(int(code))
