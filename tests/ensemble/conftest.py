"""Ensembles cut from the systems MDAnalysisTests ships, with their catalogs.

* AdK in vacuum (PSF + DCD, 98 frames x 3341 atoms) cut into three XTC replicas of 30, 20 and 48 frames;
* YiiP in a membrane (GRO + XTC, 5 frames x 43,480 atoms, with a box) cut into two of 2 and 3 frames.

Two topologies, two atom counts (214 and 564 CA atoms), five trajectories of different lengths.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from MDAnalysisTests import datafiles as D

#: name -> (system, replica, topology, frames of the source trajectory)
PIECES = {"adk-0": ("adk", 0, "psf", (0, 30)), "adk-1": ("adk", 1, "psf", (30, 50)),
          "adk-2": ("adk", 2, "psf", (50, 98)), "yiip-0": ("yiip", 0, "gro", (0, 2)),
          "yiip-1": ("yiip", 1, "gro", (2, 5))}
TOPOLOGIES = {"psf": D.PSF, "gro": D.GRO_MEMPROT}
SOURCES = {"psf": D.DCD, "gro": D.XTC_MEMPROT}


def cut(topology: str, trajectory: str, frames: tuple[int, int], out: Path) -> None:
    """Frames ``[a, b)`` of a trajectory written as XTC by MDAnalysis."""
    import MDAnalysis as mda

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(topology, trajectory)
        with mda.Writer(str(out), u.atoms.n_atoms) as w:
            for _ in u.trajectory[frames[0]:frames[1]]:
                w.write(u.atoms)


@pytest.fixture(scope="session")
def replicas(tmp_path_factory) -> dict:
    """``{"folder", "catalog" (CSV), "members": {name: (topology, xtc, labels)}}``."""
    folder = tmp_path_factory.mktemp("ensemble")
    members = {}
    for name, (system, replica, top, frames) in PIECES.items():
        xtc = folder / f"{name}.xtc"
        cut(TOPOLOGIES[top], SOURCES[top], frames, xtc)
        members[name] = (TOPOLOGIES[top], str(xtc), {"system": system, "replica": replica})
    catalog = folder / "replicas.csv"
    lines = ["name,topology,trajectory,system,replica"]
    lines += [f"{n},{t},{Path(x).name},{lab['system']},{lab['replica']}" for n, (t, x, lab) in members.items()]
    catalog.write_text("\n".join(lines) + "\n")
    return {"folder": folder, "catalog": str(catalog), "members": members}


def universe(topology: str, trajectory: str):
    import MDAnalysis as mda

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(topology, trajectory)
