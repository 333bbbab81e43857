"""``mpiexec -n 2``: whatever fails on rank 0 while ParallelWriter creates its file fails every rank, in
bounded time.  Rank 0 checks the output and reads the topology's atoms before a broadcast the other ranks
wait in; an error there other than an OutputError (a topology that cannot be read) left them waiting
for ever."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_mpi

pytestmark = pytest.mark.mpi

SCRIPT = r"""
import json, sys
from mpi4py import MPI
from trajscale.pwrite import ParallelWriter

class BrokenTopology:
    @property
    def atoms(self):   # what reading a damaged topology can raise: not a trajscale error
        raise TypeError("this topology cannot be read")

comm = MPI.COMM_WORLD
case, path = sys.argv[1], sys.argv[2]
try:
    if case == "topology":
        ParallelWriter(path, 10, comm=comm, topology=BrokenTopology())
    else:
        ParallelWriter(path, 10, comm=comm)
    got = {"rank": comm.rank, "error": None}
except BaseException as exc:
    got = {"rank": comm.rank, "error": type(exc).__name__, "message": str(exc),
           "reported_elsewhere": bool(getattr(exc, "reported_elsewhere", False))}
with open(f"{sys.argv[3]}.{comm.rank}.json", "w") as fh:   # (two ranks' stdout lines may interleave)
    json.dump(got, fh)
"""


def _outcomes(tmp_path, case: str, path) -> dict[int, dict]:
    script = tmp_path / "create.py"
    script.write_text(SCRIPT)
    results = tmp_path / "result"
    proc = run_mpi(2, [str(script), case, str(path), str(results)], timeout=90)
    got = [json.loads(f.read_text()) for f in sorted(tmp_path.glob("result.*.json"))]
    assert sorted(g["rank"] for g in got) == [0, 1], proc.stdout + proc.stderr
    return {g["rank"]: g for g in got}


def test_an_error_on_rank_0_other_than_the_outputs_fails_every_rank(tmp_path):
    got = _outcomes(tmp_path, "topology", tmp_path / "out.h5md")
    assert got[0]["error"] == "TypeError" and "cannot be read" in got[0]["message"], got
    assert got[1]["error"] == "RuntimeError", got
    assert "rank 0 failed to create" in got[1]["message"] and "cannot be read" in got[1]["message"], got
    assert not list(tmp_path.glob("*.h5md*")) and not list(tmp_path.glob(".out.h5md*"))


def test_a_bad_output_fails_every_rank_said_once(tmp_path):
    got = _outcomes(tmp_path, "output", tmp_path / "missing" / "out.h5md")
    assert {g["error"] for g in got.values()} == {"OutputError"}, got
    assert "does not exist" in got[0]["message"] and not got[0]["reported_elsewhere"], got
    assert got[1]["reported_elsewhere"], got
