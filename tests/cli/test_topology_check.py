"""The check that refuses a trajectory given as the topology reads the format as MDAnalysis's
``guess_format`` does, without importing MDAnalysis (it runs before every ``run``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trajscale.topology import trajectory_only_format

NAMES = ["a.xtc", "a.XTC", "a.xtc.gz", "b.trr.bz2", "c.dcd", "d.nc", "d.NCDF", "e.tng", "f.mdcrd", "f.trj",
         "g.gro", "g.gro.gz", "h.tpr", "i.psf", "j.pdb.bz2", "k.crd", "noext", "x.gz"]


#: MDAnalysis's formats that hold frames but no atom names, residues or masses, and how a message names them
#: (written here, independently of the formats' declared traits that the check reads).
KNOWN_FRAMES_ONLY = {"XTC": "XTC", "TRR": "TRR", "DCD": "DCD", "NC": "NetCDF", "NCDF": "NetCDF", "TNG": "TNG",
                     "MDCRD": "Amber", "TRJ": "Amber", "H5MD": "H5MD"}


@pytest.mark.parametrize("name", NAMES)
def test_format_as_mdanalysis_guesses_it(tmp_path, name):
    from MDAnalysis.lib.util import guess_format

    path = tmp_path / name
    path.write_text("not an HDF5 file\n")
    try:
        want = KNOWN_FRAMES_ONLY.get(str(guess_format(str(path))).upper())
    except (ValueError, TypeError):
        want = None
    assert trajectory_only_format(str(path)) == want


@pytest.mark.cli
def test_check_imports_no_mdanalysis(tmp_path):
    path = tmp_path / "top.xtc"
    path.write_text("x")
    code = ("import sys; from trajscale.topology import trajectory_only_format as t; "
            f"print(t({str(path)!r}), 'MDAnalysis' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert out == ["XTC", "False"]
