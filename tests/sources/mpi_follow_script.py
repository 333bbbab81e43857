"""Under mpiexec: follow a growing H5MD (or, with a third argument, the XTC of AdK in water) with the MPI
executor; rank 0 saves the RMSD and the ending."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import trajscale as ts  # noqa: E402
from tests.datafiles import PSF, TPR  # noqa: E402 - the paths without importing MDAnalysis
from trajscale.follow import FollowOptions  # noqa: E402

top = TPR if len(sys.argv) > 3 and sys.argv[3] == "xtc" else PSF
r = ts.run(ts.RMSD(select="name CA"), top, sys.argv[1], executor="mpi",
           follow=FollowOptions(idle=120, poll=0.2))
if r is not None:
    np.save(sys.argv[2], r.rmsd)
    with open(sys.argv[2] + ".json", "w") as fh:
        json.dump(r.report.meta.follow.to_dict(), fh)
