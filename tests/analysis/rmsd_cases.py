"""RMSD argument combinations checked against ``MDAnalysis.analysis.rms.RMSD``.

Shared by the serial, processes and Dask tests and by the MPI script, so every
executor runs the same cases.  A :class:`Case` names each argument's kind; the
concrete arguments (a reference Universe or AtomGroup, weight arrays) are built
from it for a :class:`System`, identically in every process.
"""

from __future__ import annotations

import functools
import itertools
import zlib
from dataclasses import dataclass

import MDAnalysis as mda
import numpy as np
from MDAnalysisTests import datafiles as D


@dataclass(frozen=True)
class System:
    """An MDAnalysisTests system, with selections that make sense in it."""

    name: str
    topology: str
    trajectory: str
    select: str                       # the fit selection
    groups: tuple[str, str]           # two group selections
    sub: str                          # the part of the system a reference AtomGroup holds
    pair: tuple[str, str, float]      # (mobile, reference, tol_mass): other atoms, same count
    n_frames: int


SYSTEMS = {s.name: s for s in [
    # PSF/DCD (AdK in vacuum, no box)
    System("adk_vacuum", D.PSF, D.DCD, "name CA", ("backbone", "resid 1-50"), "resid 1-100",
           ("resid 1-10 and name N", "resid 1-10 and name CA", 3.0), 98),
    # triclinic box (125 TIP3 waters, CHARMM PSF/DCD)
    System("triclinic_water", D.PSF_TRICLINIC, D.DCD_TRICLINIC, "name OH2", ("name H1", "resid 1-40"),
           "resid 1-60", ("name H1", "name H2", 0.1), 10),
    # AdK in water, GRO/XTC, 47,681 atoms, rhombic dodecahedron (triclinic) box
    System("adk_water", D.GRO, D.XTC, "protein and name CA", ("backbone", "resname NA+"), "protein or resname NA+",
           ("resid 1-10 and name N", "resid 1-10 and name CA", 3.0), 10),
    # cobrotoxin in water, TPR + an H5MD file written by another program (read by trajscale directly)
    System("cobrotoxin_h5md", D.TPR_xvf, D.H5MD_xvf, "protein and name CA", ("backbone", "resname CL"),
           "protein or resname CL", ("resid 1-10 and name N", "resid 1-10 and name CA", 3.0), 3),
]}


#: ``trajscale.RMSD``'s default selection.
DEFAULT_SELECT = "protein and name CA"


@dataclass(frozen=True)
class Case:
    """One combination of RMSD arguments, by kind.

    select: "str" (the system's), "default" (omitted: trajscale's ``"protein and name CA"``, given to
    MDAnalysis, whose own default is ``"all"``), "none" (None),
    "pair" (a (mobile, reference) tuple of different atoms, with tol_mass).
    weights / weights_groupselections entries: None, "mass" or "array" (seeded, positive).
    groups: whether the system's two group selections are given.
    wg: False, or one weights kind per group.
    reference: None (the trajectory), "universe" (a second Universe) or "group"
    (an AtomGroup of ``System.sub``: selections apply within it).
    """

    select: str = "str"
    weights: str | None = None
    groups: bool = False
    wg: bool | tuple = False
    reference: str | None = None
    ref_frame: int = 0

    @property
    def id(self) -> str:
        wg = "-".join(str(w) for w in self.wg) if self.wg else "no"
        return (f"sel={self.select},w={self.weights},groups={int(self.groups)},wg={wg},"
                f"ref={self.reference},frame={self.ref_frame}")

    def kwargs(self, system: System, ref_universe: mda.Universe | None) -> dict:
        """``rms.RMSD`` / ``trajscale.RMSD`` keyword arguments (the same for both)."""
        kw: dict = {"ref_frame": self.ref_frame}
        sel, groups = system.select, list(system.groups)
        if self.reference == "group":
            # Mobile: the same atoms spelled for the whole Universe; reference: within the group.
            kw["select"] = {"mobile": f"({sel}) and ({system.sub})", "reference": sel}
            groups = [f"({g}) and ({system.sub})" for g in groups]
            kw["reference"] = ref_universe.select_atoms(system.sub)
        else:
            if self.reference == "universe":
                kw["reference"] = ref_universe
            if self.select == "str":
                kw["select"] = sel
            elif self.select == "none":
                kw["select"] = None
                if self.reference == "universe":
                    kw["reference"] = ref_universe.atoms   # MDAnalysis needs an AtomGroup here
            elif self.select == "pair":
                kw["select"] = system.pair[:2]
                kw["tol_mass"] = system.pair[2]
        if self.groups:
            kw["groupselections"] = groups
        top = _topology(system.topology)
        fit = self._fit_atoms(top, kw.get("select", DEFAULT_SELECT))
        kw["weights"] = self._weights(self.weights, fit.n_atoms, 0)
        if self.wg:
            kw["weights_groupselections"] = [self._weights(w, top.select_atoms(g).n_atoms, 1 + i)
                                             for i, (w, g) in enumerate(zip(self.wg, groups, strict=False))]
        return kw

    @staticmethod
    def _fit_atoms(top, select):
        if select is None:
            return top.atoms
        mobile = select["mobile"] if isinstance(select, dict) else select[0] if isinstance(select, tuple) else select
        return top.select_atoms(mobile)

    def _weights(self, kind, n: int, salt: int):
        if kind != "array":
            return kind
        seed = zlib.crc32(f"{self.id}/{salt}".encode())
        return np.random.default_rng(seed).uniform(0.5, 2.0, n)


@functools.cache
def _topology(path: str) -> mda.Universe:
    return mda.Universe(path)


def all_cases(n_frames: int) -> list[Case]:
    """Every combination of weights x groups (with and without their own weights) x reference,
    then each other kind of selection; reference frames cycle through first, middle, last."""
    frames = [0, n_frames // 2, -1]
    out = []
    group_modes = [(False, False), (True, False), (True, ("mass", "array")), (True, (None, "mass"))]
    combos = itertools.product([None, "mass", "array"], group_modes, [None, "universe", "group"])
    for i, (weights, (groups, wg), ref) in enumerate(combos):
        out.append(Case("str", weights, groups, wg, ref, frames[i % 3]))
    for i, weights in enumerate([None, "mass", "array"]):
        out.append(Case("default", weights, groups=i > 0, ref_frame=frames[i]))
    out += [Case("none", "mass", reference="universe", ref_frame=-2), Case("none", None, groups=True),
            Case("pair", "mass", groups=True), Case("pair", "array", reference="universe", ref_frame=1)]
    return out


def representative_cases(n_frames: int) -> list[Case]:
    """Each kind of each argument at least once, in few runs."""
    mid = n_frames // 2
    return [
        Case("default"),
        Case("str", "mass", groups=True, ref_frame=-1),
        Case("str", "array", True, ("mass", "array"), "universe", mid),
        Case("str", "mass", True, (None, "mass"), "group", 1),
        Case("pair", "mass", groups=True),
        Case("none", None, reference="universe", ref_frame=-2),
    ]


def parallel_cases(n_frames: int) -> list[Case]:
    """What each parallel executor checks: groups with their own weights, both kinds of reference."""
    return representative_cases(n_frames)[2:4]


@functools.cache
def universe(name: str, copy: int = 0) -> mda.Universe:
    """The system's Universe (``copy`` 1: a second one, for references), built once per process.

    Reusing them is safe: RMSD moves a trajectory's frame and puts it back, and
    readers reload coordinates on every frame.
    """
    s = SYSTEMS[name]
    return mda.Universe(s.topology, s.trajectory)


def mdanalysis_table(system: System, case: Case) -> np.ndarray:
    """``results.rmsd`` of MDAnalysis's RMSD for ``case`` (frame, time, rmsd, groups...)."""
    from MDAnalysis.analysis import rms

    kw = case.kwargs(system, universe(system.name, 1))
    kw.setdefault("select", DEFAULT_SELECT)   # trajscale's default (MDAnalysis's is "all")
    return rms.RMSD(universe(system.name).atoms, **kw).run().results.rmsd
