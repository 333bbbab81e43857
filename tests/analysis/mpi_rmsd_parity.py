"""``mpiexec -n N python mpi_rmsd_parity.py OUT.npz [VACUUM.h5md]``: the parallel RMSD cases on MPI.

The PSF/DCD system is read from ``VACUUM.h5md`` (its H5MD conversion: parallel
HDF5) when given, the triclinic one from its DCD (through MDAnalysis).

Every rank builds the same arguments (reference Universes and AtomGroups, seeded
weight arrays) from :mod:`tests.analysis.rmsd_cases`; rank 0 writes one table
per case to ``OUT.npz`` under the key ``"<system>:<case id>"``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository root, for `tests`

import numpy as np  # noqa: E402

import trajscale as ts  # noqa: E402
from tests.analysis.rmsd_cases import SYSTEMS, parallel_cases, universe  # noqa: E402
from trajscale.executors.mpi import MPIExecutor  # noqa: E402

SYSTEM_NAMES = ("adk_vacuum", "triclinic_water")


def main(out: str, vacuum_h5md: str | None = None) -> int:
    tables = {}
    with MPIExecutor() as ex:   # one communicator for every case
        for name in SYSTEM_NAMES:
            s = SYSTEMS[name]
            for case in parallel_cases(s.n_frames):
                kw = case.kwargs(s, universe(name, 1))
                traj = vacuum_h5md if name == "adk_vacuum" and vacuum_h5md else s.trajectory
                r = ts.run(ts.RMSD(**kw), universe(name), traj, executor=ex, n_tasks=4)
                if r is not None:   # rank 0
                    tables[f"{name}:{case.id}"] = r.table()
                    tables[f"{name}:{case.id}:workers"] = np.array(r.report.n_workers)
    if ex.is_root:
        np.savez(out, **tables)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
