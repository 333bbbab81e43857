"""Under mpiexec: MDAnalysis's rms.RMSD and rdf.InterRDF on trajscale.mda.MPIBackend; rank 0 saves results."""

from __future__ import annotations

import json
import sys
import warnings

import MDAnalysis as mda
import numpy as np
from MDAnalysis.analysis import rdf, rms
from MDAnalysisTests import datafiles as D

import trajscale.mda

warnings.filterwarnings("ignore")


def main(out: str) -> int:
    backend = trajscale.mda.MPIBackend()
    u = mda.Universe(D.PSF, D.DCD)
    r = rms.RMSD(u.select_atoms("name CA")).run(backend=backend, n_parts=5, unsupported_backend=True)
    w = mda.Universe(D.PSF_TRICLINIC, D.DCD_TRICLINIC)
    ow = w.select_atoms("name OH2")
    g = rdf.InterRDF(ow, ow, nbins=40, range=(0.0, 8.0), exclusion_block=(1, 1)).run(
        backend=backend, n_parts=3, unsupported_backend=True)
    refused = ""
    try:
        rms.RMSF(u.select_atoms("name CA")).run(backend=backend, unsupported_backend=True)
    except ValueError as exc:
        refused = str(exc)
    if backend.comm.Get_rank() == 0:
        np.savez(out, rmsd=r.results.rmsd, count=g.results.count, rdf=g.results.rdf,
                 report=json.dumps(g.report.to_dict()), refused=refused)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
