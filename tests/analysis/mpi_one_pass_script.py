"""Under mpiexec: the boxed analyses in one pass on the MPI executor; rank 0 pickles the results."""

from __future__ import annotations

import dataclasses
import pickle
import sys

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))

import trajscale as ts  # noqa: E402
from tests.analysis.one_pass_cases import boxed_analyses  # noqa: E402


def main(top: str, traj: str, out: str) -> int:
    names = ["rmsd", "rmsf", "rdf", "contacts", "per_frame", "user_reduce"]
    made = boxed_analyses()
    got = ts.run([made[n] for n in names], top, traj, executor="mpi", n_tasks=3, max_block_bytes=300_000)
    if got is not None:
        with open(out, "wb") as f:
            pickle.dump({n: dataclasses.replace(r, report=None) for n, r in zip(names, got, strict=True)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
