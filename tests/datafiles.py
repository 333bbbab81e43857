"""Paths of MDAnalysisTests' data files for the tests' child processes (scripts, MPI ranks, producers),
found without importing ``MDAnalysisTests.datafiles``, which imports MDAnalysis: about a second of CPU in
every process that only wants a path (a run from a cached topology imports no MDAnalysis of its own).
tests/sources/test_follow.py checks that they are the paths ``MDAnalysisTests.datafiles`` gives."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

DATA = Path(find_spec("MDAnalysisTests").submodule_search_locations[0]) / "data"
PSF = str(DATA / "adk.psf")
DCD = str(DATA / "adk_dims.dcd")
TPR = str(DATA / "adk_oplsaa.tpr")
PSF_TRICLINIC = str(DATA / "tip125_tric_C36.psf")
