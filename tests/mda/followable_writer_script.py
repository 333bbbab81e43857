"""Write N frames of AdK (PSF/DCD) with ``trajscale.mda.Writer(followable=True)``, say so after each, then
wait to be killed (test_writer_follow.py).

usage: followable_writer_script.py OUT N
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import MDAnalysis as mda
from MDAnalysisTests import datafiles as D

import trajscale.mda  # noqa: F401 - registers format TRAJSCALE

warnings.filterwarnings("ignore", module="MDAnalysis")


def main() -> None:
    out, n = sys.argv[1], int(sys.argv[2])
    print(f"pid {os.getpid()}", flush=True)
    u = mda.Universe(D.PSF, D.DCD)
    w = mda.Writer(out, u.atoms.n_atoms, format="TRAJSCALE", followable=True)
    for ts in u.trajectory[:n]:
        w.write(u.atoms)
        print(f"wrote {ts.frame + 1}", flush=True)
    print("waiting", flush=True)
    time.sleep(600)   # never closed: the test kills this process


if __name__ == "__main__":
    main()
