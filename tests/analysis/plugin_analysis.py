"""An analysis from outside trajscale, for the test that a registered analysis reaches the command line:
its module declares the analysis and its options; one line adds it to the registry."""

from __future__ import annotations

from trajscale.analysis.base import Analysis, FrameRows, Prepared
from trajscale.analysis.options import Command, Option
from trajscale.analysis.results import SERIES_OUT, TimeSeries
from trajscale.topology import select_atoms


class MeanZ(Analysis):
    """The mean z of ``select`` per frame."""

    name = "mean_z"
    formats = TimeSeries.formats
    command = Command("mean z of the atoms per frame", f"--out: {SERIES_OUT}", (Option("select", "atoms"),))

    def __init__(self, select: str = "name CA") -> None:
        self.select = select

    @property
    def selections(self) -> tuple[str, ...]:
        return (self.select,)

    def get_config(self) -> dict:
        return {"name": self.name, "select": self.select}

    def prepare(self, universe, source) -> Prepared:
        return Prepared(atoms=select_atoms(universe, self.select, "select").indices)

    def map(self, block, prep: Prepared) -> FrameRows:
        return FrameRows(block.frames, block.time, {"z": block.positions[..., 2].mean(axis=1, dtype="f8")})

    def result(self, reduced: FrameRows, prep: Prepared) -> TimeSeries:
        return TimeSeries(reduced.frame, reduced.time, reduced.columns["z"], "z")
