"""Root-mean-square fluctuation per atom, as ``MDAnalysis.analysis.rms.RMSF``.

Each block gives its frame count and the exact fixed-point sums of the coordinates and their squares
(:mod:`trajscale.kernels.sums`, relative to the trajectory's first frame); partials add as integers, so RMSF splits
over any number of workers, in any order, with the same bits (MDAnalysis's own cannot split at all).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..block import Block, check_finite
from ..errors import BadCoordinatesError
from ..kernels.sums import mean_and_m2
from .base import Analysis, Prepared, no_frames
from .fitting import Fitted, fitted_sums
from .options import FIT_SELECT, REF_FRAME, Command, Option
from .results import arrays_of, output_format, save_as


def add_sums(parts: list[dict]) -> dict:
    """Partials ``{"n", "words"}`` added (integers: exact, so any order gives the same bits)."""
    parts = [p for p in parts if p and p["n"]]
    if not parts:
        return {}
    # (a new array for the sum, the partials untouched: no copy of the first and then an addition)
    words = parts[0]["words"] + parts[1]["words"] if len(parts) > 1 else parts[0]["words"].copy()
    for p in parts[2:]:
        words += p["words"]
    return {"n": sum(p["n"] for p in parts), "words": words}


@dataclass(frozen=True)
class RMSFResult:
    """``rmsf`` (N,) Å per atom of the selection (``atoms``: their global indices); ``mean`` (N, 3)."""

    rmsf: np.ndarray
    mean: np.ndarray
    atoms: np.ndarray
    n_frames: int
    report: object = None
    formats: ClassVar[tuple[str, ...]] = (".csv", ".h5", ".hdf5", ".npz", ".npy")

    def save(self, path) -> None:
        """``.csv`` (columns atom, rmsf), ``.npy`` (``rmsf``), ``.h5``/``.hdf5``/``.npz`` (arrays ``rmsf``,
        ``mean``, ``atoms`` and ``n_frames``); any other extension is refused."""
        save_as(path, output_format(path, self.formats, "rmsf"),
                table=(["atom", "rmsf"], np.column_stack([self.atoms, self.rmsf]), ["%d", "%.8g"]),
                npy=self.rmsf, arrays=arrays_of(self), attrs={"n_frames": self.n_frames})


class RMSF(Fitted, Analysis):
    """Per-atom RMSF of ``select``, optionally after superposing ``fit_select`` on a reference.

    Parameters
    ----------
    select
        Atoms whose fluctuations are measured (default ``"protein and name CA"``, as the command line's).
    reference, ref_frame
        Reference for the fit: an MDAnalysis Universe/AtomGroup at its ``ref_frame``, or the
        analysed trajectory's ``ref_frame`` (default).
    fit_select
        None (no fit: MDAnalysis's RMSF on coordinates as they are) or the atoms superposed on
        the reference in every frame first (``align.AlignTraj(..., select=fit_select)``).
    """

    name = "rmsf"
    command = Command("per-atom RMSF (rms.RMSF), optionally after a fit",
                      "--out: .csv (atom, rmsf), .npy (rmsf), .h5/.hdf5/.npz (rmsf, mean, atoms)",
                      (Option("select", "atoms"), FIT_SELECT, REF_FRAME))
    formats = RMSFResult.formats
    per_frame = False

    def __init__(self, select: str = "protein and name CA", reference=None, ref_frame: int = 0,
                 fit_select: str | None = None):
        self.select, self.reference, self.ref_frame, self.fit_select = select, reference, int(ref_frame), fit_select

    def get_config(self) -> dict:
        return {"name": self.name, "select": self.select, "ref_frame": self.ref_frame, "fit_select": self.fit_select}

    @property
    def trajectory_frame(self) -> int | None:
        """The reference frame of the fit (with ``fit_select``), when it is the analysed trajectory's."""
        return None if self.reference is not None or self.fit_select is None else self.ref_frame

    @property
    def summary_notes(self) -> tuple[str, ...]:
        """Whether the frames were superposed: without ``fit_select`` they are not (MDAnalysis's RMSF
        does not fit either), and a protein that tumbles shows its rotation as fluctuation."""
        if self.fit_select is None:
            return ("rmsf: frames not superposed (coordinates as stored; --fit-select SELECTION superposes "
                    "each frame on the reference first, as align.AlignTraj does)",)
        return (f"rmsf: each frame superposed first, by {self.fit_select!r}, on the reference (frame "
                f"{self.ref_frame})",)

    def prepare(self, universe, source) -> Prepared:
        return self.prepare_fitted(universe, source, self.fit_select)

    def map(self, block: Block, prep: Prepared) -> dict:
        s = prep.state
        if "fit" in s:   # the fit's arithmetic must not meet NaN/inf
            check_finite(block, block.positions, s["path"])
        # without a fit the block's float32 coordinates go to the kernel as they are; a fit moves a few MB at once
        try:
            words = fitted_sums(block.positions, s, s["shift"], frames=block.frames, source=s["path"])
        except BadCoordinatesError:
            # the kernel stops at a value that is not finite or too far: a NaN/inf is named as check_finite
            # names it (its first frame), so the sums' own pass over the block is the only one
            check_finite(block, block.positions, s["path"])
            raise
        return {"n": block.n_frames, "words": words}

    def reduce(self, partials: list[dict]) -> dict:
        return add_sums(partials)

    def result(self, reduced: dict, prep: Prepared) -> RMSFResult:
        n = reduced.get("n", 0)
        atoms = prep.state["sel_atoms"]
        if not n:
            raise no_frames(prep.state["path"], self.name)
        mean, m2 = mean_and_m2(reduced["words"], n, prep.state["shift"])
        return RMSFResult(np.sqrt(m2.sum(axis=1) / n), mean, atoms, int(n))
