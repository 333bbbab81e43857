"""Under mpiexec: MDAnalysis's RMSD on trajscale.mda.MPIBackend over a Universe read by trajscale.mda.Reader
with MPI-IO (comm=); rank 0 saves the result."""

import sys

import MDAnalysis as mda
import numpy as np
from MDAnalysis.analysis import rms
from mpi4py import MPI

import trajscale.mda

top, traj, out = sys.argv[1:4]
u = mda.Universe(top, traj, format="TRAJSCALE", comm=MPI.COMM_WORLD)
assert u.trajectory._source.get_config().get("driver") == "mpio", u.trajectory._source.get_config()
r = rms.RMSD(u, select="name CA").run(backend=trajscale.mda.MPIBackend(), unsupported_backend=True)
if MPI.COMM_WORLD.rank == 0:
    np.save(out, r.results.rmsd)
