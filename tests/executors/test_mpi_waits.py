"""Ranks that wait for another wait asleep: MPICH's blocking collectives spin, taking a core from the
ranks still working (on an oversubscribed node, or beside a simulation)."""

from __future__ import annotations

import pytest

from tests.conftest import run_mpi

pytestmark = pytest.mark.mpi

#: Each script's start: its communicator, and this process's CPU seconds so far.
PREAMBLE = '''
import resource, sys, time
from mpi4py import MPI

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

comm = MPI.COMM_WORLD
'''

#: Rank 0 prepares for 3 s (sleeping) before it shares; every rank writes the wall and CPU seconds its share
#: took to a file of its own (mpiexec may interleave the ranks' output lines).
SCRIPT = PREAMBLE + '''
from trajscale.sharing import share_on_comm
t0, c0 = time.perf_counter(), cpu()
got = share_on_comm(comm, lambda: (time.sleep(3.0), {"frames": 7})[1], "prepare")
with open(f"{sys.argv[1]}/rank{comm.rank}.txt", "w") as f:
    f.write(f"rank {comm.rank} waited {time.perf_counter() - t0:.2f} s cpu {cpu() - c0:.3f} s got {got}")
'''


def _each_ranks_words(tmp_path, script: str, n: int) -> list[list[str]]:
    """``script`` run on ``n`` ranks: the words each rank wrote to its own file."""
    path = tmp_path / "script.py"
    path.write_text(script)
    proc = run_mpi(n, [str(path), str(tmp_path)], timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [(tmp_path / f"rank{r}.txt").read_text().split() for r in range(n)]


def test_ranks_waiting_for_rank_0s_preparation_use_no_cpu(tmp_path):
    lines = _each_ranks_words(tmp_path, SCRIPT, 3)
    for _, rank, _, waited, _, _, cpu, _, _, *got in lines:
        assert " ".join(got) == "{'frames': 7}"
        if rank != "0":
            # a spinning wait costs its whole wall time (or the share of a core a loaded machine gives it)
            assert float(waited) >= 2.9 and float(cpu) < 0.3, (rank, waited, cpu)


#: Rank 1 ends its task 3 s after rank 0 ends its own; rank 0's progress display waits for rank 1's message.
PROGRESS = PREAMBLE + '''
from trajscale.executors.mpi import _RankProgress
with _RankProgress(comm, 2, True) as bar:
    if comm.rank == 1:
        time.sleep(3.0)
    bar.task_done()
    t0, c0 = time.perf_counter(), cpu()
with open(f"{sys.argv[1]}/rank{comm.rank}.txt", "w") as f:
    f.write(f"{time.perf_counter() - t0:.2f} {cpu() - c0:.3f}")
'''


def test_rank_0s_progress_waits_for_the_other_ranks_tasks_asleep(tmp_path):
    waited, cpu = map(float, _each_ranks_words(tmp_path, PROGRESS, 2)[0])
    assert waited >= 2.5 and cpu < 0.3, (waited, cpu)   # a spinning wait costs its whole wall time
