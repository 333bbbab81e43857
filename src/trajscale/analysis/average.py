"""Average structure after superposition, as ``MDAnalysis.analysis.align.AverageStructure``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..block import Block
from .base import Analysis, Prepared, check_finite
from .fitting import fitted, prepare_fit
from ..kernels.sums import frame_sums, mean_and_m2
from .results import arrays_of, write_arrays
from .rmsf import add_sums, first_frame_shift


@dataclass(frozen=True)
class AverageResult:
    """``positions`` (N, 3) Å: the mean of ``atoms`` over ``n_frames`` frames, in the reference's frame."""

    positions: np.ndarray
    atoms: np.ndarray
    n_frames: int
    report: object = None

    def save(self, path, universe=None) -> None:
        """``.h5`` arrays, or ``.pdb`` (needs the topology ``universe``) through MDAnalysis's writer."""
        if str(path).lower().endswith(".pdb"):
            import MDAnalysis as mda
            from MDAnalysis.coordinates.memory import MemoryReader

            from ..util import atomic_output

            u = mda.Merge(universe.atoms[self.atoms])   # the topology alone may have no coordinates
            u.load_new(self.positions[None].astype(np.float32), format=MemoryReader)
            with atomic_output(path) as tmp:
                u.atoms.write(str(tmp), file_format="PDB")
            return
        write_arrays(path, arrays_of(self), {"n_frames": self.n_frames})


class AverageStructure(Analysis):
    """Mean coordinates of ``select`` after superposing ``fit_select`` (default: ``select``) on the reference.

    Parameters mirror MDAnalysis's: ``select`` (the atoms averaged and, by default, fitted),
    ``fit_select`` (other fit atoms), ``reference`` / ``ref_frame`` (default: the trajectory's frame 0).
    """

    name = "average"
    per_frame = False

    def __init__(self, select: str = "all", fit_select: str | None = None, reference=None, ref_frame: int = 0):
        self.select, self.fit_select, self.reference, self.ref_frame = select, fit_select, reference, int(ref_frame)

    def get_config(self) -> dict:
        return {"name": self.name, "select": self.select, "fit_select": self.fit_select, "ref_frame": self.ref_frame}

    def prepare(self, universe, source) -> Prepared:
        fit = self.select if self.fit_select is None else self.fit_select
        atoms, state = prepare_fit(universe, source, self.select, fit, self.reference, self.ref_frame)
        state.update(path=source.path, sel_atoms=universe.select_atoms(self.select).indices,
                     shift=first_frame_shift(source, atoms, state))
        return Prepared(atoms=atoms, state=state)

    def map(self, block: Block, prep: Prepared) -> dict:
        s = prep.state
        check_finite(block, block.positions, s["path"])
        x = fitted(block.positions, s)
        return {"n": block.n_frames, "words": frame_sums(x, s["shift"], squares=False, frames=block.frames,
                                                          source=s["path"])}

    def reduce(self, partials: list[dict]) -> dict:
        return add_sums(partials)   # exact integer sums: the same bits for any split

    def result(self, reduced: dict, prep: Prepared) -> AverageResult:
        atoms = prep.state["sel_atoms"]
        n = reduced.get("n", 0)
        pos = mean_and_m2(reduced["words"], n, prep.state["shift"])[0] if n else np.full((len(atoms), 3), np.nan)
        return AverageResult(pos, atoms, int(n))
