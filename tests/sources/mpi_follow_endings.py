"""Under mpiexec: ``trajscale run rmsd ... --follow --executor mpi`` (the CLI's ``main``, in this process) on
a replaced XTC, an XTC damaged before the run starts and a killed producer's H5MD, one after another, in the
folder ``argv[1]`` (the test writes the last two first); rank 0 saves each run's exit status in codes.json."""

from __future__ import annotations

import json
import sys
import threading
import time
import warnings
from pathlib import Path

from mpi4py import MPI

from tests.datafiles import PSF
from trajscale.cli.main import main

warnings.filterwarnings("ignore")
folder = Path(sys.argv[1])
rank = MPI.COMM_WORLD.Get_rank()
if rank == 0:   # the writer; the other ranks need not import MDAnalysis (the test module's imports)
    from tests.sources.test_follow_endings import _replace, write_xtc


def replace_once_analysed(out: Path, traj: Path) -> None:
    """Replace ``traj`` as ``gmx mdrun`` does once ``out`` holds its 8 frames' rows."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if out.exists() and len(out.read_text().splitlines()) >= 9:
            _replace(traj)
            return
        time.sleep(0.1)


codes = {}
for case, name, idle in (("replaced", "rp.xtc", "120"), ("damaged", "dm.xtc", "60"), ("killed", "killed.h5md", "3")):
    traj, out = folder / name, folder / f"{case}.csv"
    thread = None
    if case == "replaced" and rank == 0:
        write_xtc(traj, slice(0, 8))
        thread = threading.Thread(target=replace_once_analysed, args=(out, traj))
        thread.start()
    MPI.COMM_WORLD.Barrier()
    codes[case] = main(["run", "rmsd", PSF, str(traj), "--follow", "--executor", "mpi", "--idle", idle,
                        "--every-frames", "1", "--out", str(out)])
    if thread is not None:
        thread.join()
if rank == 0:
    (folder / "codes.json").write_text(json.dumps(codes))
