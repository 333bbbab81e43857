"""Average structure after superposition, as ``MDAnalysis.analysis.align.AverageStructure``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..block import Block, check_finite
from ..kernels.geometry import box_volume
from ..kernels.sums import mean_and_m2
from .base import Analysis, Prepared, no_frames
from .fitting import Fitted, fitted_sums
from .options import FIT_SELECT, REF_FRAME, Command, Option
from .results import arrays_of, output_format, save_as
from .rmsf import add_sums

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AverageResult:
    """``positions`` (N, 3) Å: the mean of ``atoms`` over ``n_frames`` frames, in the reference's frame;
    ``box`` (6,): the mean of the frames' boxes (lengths in Å, angles in degrees), or None unless every
    frame has a box of non-zero volume (a mean over some of the frames is not the frames' mean box)."""

    positions: np.ndarray
    atoms: np.ndarray
    n_frames: int
    report: object = None
    box: np.ndarray | None = None
    formats: ClassVar[tuple[str, ...]] = (".pdb", ".h5", ".hdf5", ".npz", ".npy")

    def save(self, path, universe=None) -> None:
        """``.pdb`` (needs the topology ``universe``; CRYST1 is the mean box) through MDAnalysis's writer,
        ``.npy`` (``positions``) or ``.h5``/``.hdf5``/``.npz`` (arrays ``positions``, ``atoms``, ``box``
        and ``n_frames``); any other extension is refused."""
        ext = output_format(path, self.formats, "average")
        if ext == ".pdb" and universe is None:
            from ..errors import ConfigError

            raise ConfigError(f"{path}: a PDB of the average structure needs the topology: save(path, universe=u)")
        arrays = arrays_of(self)
        if self.box is None:
            arrays.pop("box", None)
        save_as(path, ext, npy=self.positions, arrays=arrays, attrs={"n_frames": self.n_frames},
                pdb=lambda tmp: self._write_pdb(tmp, universe))

    def _write_pdb(self, tmp, universe) -> None:
        import warnings

        import MDAnalysis as mda
        from MDAnalysis.coordinates.memory import MemoryReader

        u = mda.Merge(universe.atoms[self.atoms])   # the topology alone may have no coordinates
        u.load_new(self.positions[None].astype(np.float32), format=MemoryReader,
                   dimensions=None if self.box is None else self.box.astype(np.float32))
        with warnings.catch_warnings():   # a line per PDB column the topology lacks: its defaults are fine
            warnings.filterwarnings("ignore", message="Found (no information|missing)", category=UserWarning)
            u.atoms.write(str(tmp), file_format="PDB")


class AverageStructure(Fitted, Analysis):
    """Mean coordinates of ``select`` after superposing ``fit_select`` (default: ``select``) on the reference.

    Parameters mirror MDAnalysis's: ``select`` (the atoms averaged and, by default, fitted),
    ``fit_select`` (other fit atoms), ``reference`` / ``ref_frame`` (default: the trajectory's frame 0).
    ``select`` defaults to ``"protein and name CA"``, as the command line's.
    """

    name = "average"
    command = Command("average structure after superposition (align.AverageStructure)",
                      "--out: .pdb (CRYST1: the mean box), .npy (positions), .h5/.hdf5/.npz (positions, atoms, box)",
                      (Option("select", "atoms"), FIT_SELECT, REF_FRAME))
    formats = AverageResult.formats
    topology_outputs = (".pdb",)
    per_frame = False

    def __init__(self, select: str = "protein and name CA", fit_select: str | None = None, reference=None,
                 ref_frame: int = 0):
        self.select, self.fit_select, self.reference, self.ref_frame = select, fit_select, reference, int(ref_frame)

    def get_config(self) -> dict:
        return {"name": self.name, "select": self.select, "fit_select": self.fit_select, "ref_frame": self.ref_frame}

    @property
    def trajectory_frame(self) -> int | None:
        """The reference frame of the fit, when the reference is the analysed trajectory."""
        return None if self.reference is not None else self.ref_frame

    def prepare(self, universe, source) -> Prepared:
        return self.prepare_fitted(universe, source, self.select if self.fit_select is None else self.fit_select)

    def map(self, block: Block, prep: Prepared) -> dict:
        s = prep.state
        check_finite(block, block.positions, s["path"])
        boxed = box_volume(block.box) > 0   # frames without a box hold zeros: the mean box then has no value
        # a fit moves a few MB of the block at once (no float64 copies of the whole block)
        return {"n": block.n_frames, "words": fitted_sums(block.positions, s, s["shift"], squares=False,
                                                          frames=block.frames, source=s["path"]),
                "n_box": int(boxed.sum()), "box": block.box[boxed].sum(axis=0, dtype=np.float64)}

    def reduce(self, partials: list[dict]) -> dict:
        parts = [p for p in partials if p and p["n"]]
        if not parts:
            return {}
        # exact integer sums of the positions; float32 boxes summed in float64 are exact too (multiples of
        # their ulp, far below 2**53 of them): the same bits for any split
        return {**add_sums(parts), "n_box": sum(p["n_box"] for p in parts),
                "box": np.sum([p["box"] for p in parts], axis=0)}

    def result(self, reduced: dict, prep: Prepared) -> AverageResult:
        n = reduced.get("n", 0)
        if not n:
            raise no_frames(prep.state["path"], self.name)
        pos = mean_and_m2(reduced["words"], n, prep.state["shift"])[0]
        whole = reduced["n_box"] == n
        if not whole and reduced["n_box"]:
            log.warning("%s: %d of %d frames have no periodic box: the average structure has none",
                        prep.state["path"], n - reduced["n_box"], n)
        return AverageResult(pos, prep.state["sel_atoms"], int(n), box=reduced["box"] / n if whole else None)
