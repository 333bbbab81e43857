"""Under mpiexec: every analysis of one system on the MPI executor with ``n_tasks`` tasks; rank 0 saves
each result's arrays (for an exact comparison with a serial run)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import trajscale as ts  # noqa: E402
from tests.analysis.same_bits_cases import ANALYSES, TOPOLOGY, result_arrays  # noqa: E402


def main(system: str, h5md: str, n_tasks: str, out: str) -> int:
    saved = {}
    with ts.make_executor("mpi") as ex:
        for name, make in ANALYSES.items():
            r = ts.run(make(system), TOPOLOGY, h5md, executor=ex, n_tasks=int(n_tasks),
                       max_block_bytes=4096 * 12 * 7)
            if r is not None:
                saved.update({f"{name}__{k}": v for k, v in result_arrays(r).items()})
    if saved:
        np.savez(out, **saved)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
