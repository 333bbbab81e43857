"""Mass-weighted radius of gyration per frame, as ``AtomGroup.radius_of_gyration()``."""

from __future__ import annotations

import numpy as np

from ..block import Block, check_finite
from ..kernels.geometry import radius_of_gyration
from ..topology import select_atoms
from .base import Analysis, FrameRows, OneSelection, Prepared, masses_of, positive_weights
from .options import Command, Option
from .results import SERIES_OUT, TimeSeries


class RadiusOfGyration(OneSelection, Analysis):
    """``r.rgyr`` (F,) Å, with ``r.frames`` and ``r.times``.

    Parameters
    ----------
    select
        Atoms (their topology masses weight the centre and the sum); default ``"protein and name CA"``,
        as the command line's.
    """

    name = "rgyr"
    command = Command("mass-weighted radius of gyration per frame", f"--out: {SERIES_OUT}",
                      (Option("select", "atoms"),))
    formats = TimeSeries.formats

    def __init__(self, select: str = "protein and name CA") -> None:
        self.select = select

    def get_config(self) -> dict:
        return {"name": self.name, "select": self.select}

    def prepare(self, universe, source) -> Prepared:
        group = select_atoms(universe, self.select, "selection")
        masses = positive_weights(masses_of(group, "the radius of gyration (mass-weighted) needs"), "masses",
                                  f"selection {self.select!r}")
        return Prepared(atoms=group.indices, state={"masses": masses, "path": source.path})

    def map(self, block: Block, prep: Prepared) -> FrameRows:
        check_finite(block, block.positions, prep.state["path"])
        return FrameRows(block.frames, block.time, {"rgyr": radius_of_gyration(block.positions, prep.state["masses"])})

    def result(self, reduced: FrameRows, prep: Prepared) -> TimeSeries:
        return TimeSeries(reduced.frame, reduced.time, reduced.columns.get("rgyr", np.empty(0)), "rgyr")
