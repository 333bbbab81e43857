"""Distance between the centres of mass of two selections per frame, with minimum image.

MDAnalysis users' ``calc_bonds(g1.center_of_mass(), g2.center_of_mass(), box=u.dimensions)`` per frame: the
centres of the coordinates as stored (no unwrapping), the distance by minimum image in each frame's box.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..block import Block, check_finite
from ..errors import ConfigError
from ..kernels.geometry import centre_of_mass, pair_distances
from ..topology import select_atoms
from .base import Analysis, FrameRows, MinimumImage, Prepared, TwoSelections, masses_of, positive_weights
from .options import NO_PBC, Command, Option
from .results import SERIES_OUT, TimeSeries

WEIGHTS = ("mass", None)


@dataclass(frozen=True)
class CentreState:
    """What ``prepare`` hands every worker; indices are into the block's atoms (``Prepared.atoms``)."""

    i1: np.ndarray
    i2: np.ndarray
    w1: np.ndarray | None   # (N1,) weights of the first centre (None: the geometric centre)
    w2: np.ndarray | None
    path: str               # the trajectory, for error messages


class CentreOfMassDistance(MinimumImage, TwoSelections, Analysis):
    """``r.distance`` (F,) Å between the centres of ``select1`` and ``select2``, with ``r.frames`` and ``r.times``.

    Parameters
    ----------
    select1, select2
        The two groups.
    weights
        ``"mass"`` (centres of mass, the default; the topology needs masses) or None (geometric centres,
        MDAnalysis's ``center_of_geometry()``).
    pbc
        The distance by minimum image in each frame's box; every frame must then have a periodic box
        (``needs_box``). ``pbc=False`` for a trajectory without periodic boundaries.
    """

    name = "com_distance"
    command = Command("distance between the centres of mass of two selections (minimum image)",
                      f"--out: {SERIES_OUT}",
                      (Option("select1", "group A", required=True), Option("select2", "group B", required=True),
                       Option("geometric", "geometric centres instead of centres of mass (a topology without "
                              "masses)", keyword="weights", switch=None),
                       NO_PBC))
    formats = TimeSeries.formats

    def __init__(self, select1: str, select2: str, weights: str | None = "mass", pbc: bool = True) -> None:
        if weights not in WEIGHTS:
            raise ConfigError(f"com_distance weights must be 'mass' or None, got {weights!r}")
        self.select1, self.select2, self.weights, self.pbc = select1, select2, weights, bool(pbc)

    def get_config(self) -> dict:
        return {"name": self.name, "select1": self.select1, "select2": self.select2, "weights": self.weights,
                "pbc": self.pbc}

    def prepare(self, universe, source) -> Prepared:
        groups = [select_atoms(universe, sel, what) for sel, what in ((self.select1, "select1"),
                                                                       (self.select2, "select2"))]
        weights = [None, None]
        if self.weights == "mass":
            weights = [positive_weights(masses_of(g, "centres of mass need", ", or use weights=None"),
                                        "masses", f"selection {sel!r}")
                       for g, sel in zip(groups, self.selections, strict=True)]
        atoms = np.union1d(groups[0].indices, groups[1].indices)
        return Prepared(atoms=atoms, state=CentreState(np.searchsorted(atoms, groups[0].indices),
                                                       np.searchsorted(atoms, groups[1].indices),
                                                       *weights, source.path))

    def map(self, block: Block, prep: Prepared) -> FrameRows:
        s: CentreState = prep.state
        check_finite(block, block.positions, s.path)
        c1 = centre_of_mass(block.positions[:, s.i1], s.w1)
        c2 = centre_of_mass(block.positions[:, s.i2], s.w2)
        d = pair_distances(c1[:, None], c2[:, None], block.box if self.pbc else None)[:, 0]
        return FrameRows(block.frames, block.time, {"distance": d})

    def result(self, reduced: FrameRows, prep: Prepared) -> TimeSeries:
        return TimeSeries(reduced.frame, reduced.time, reduced.columns.get("distance", np.empty(0)), "distance")
