"""Root-mean-square fluctuation per atom, as ``MDAnalysis.analysis.rms.RMSF``.

Each block gives its frame count, mean and sum of squared deviations (float64,
two passes over the block); blocks merge with Chan et al.'s parallel formula,
so RMSF splits over any number of workers (MDAnalysis's own cannot).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..block import Block
from ..kernels.geometry import frame_moments
from .base import Analysis, Prepared, check_finite
from .fitting import fitted, prepare_fit
from .results import arrays_of, output_format, save_as


def moments(x: np.ndarray) -> dict:
    """Count, mean and sum of squared deviations over the frames of (F, N, 3) (float64 results)."""
    mean, m2 = frame_moments(x)
    return {"n": x.shape[0], "mean": mean, "m2": m2, "start": None}


def merge_moments(parts: list[dict]) -> dict:
    """Chan's pairwise update over partial moments, in frame order (deterministic)."""
    parts = sorted((p for p in parts if p and p["n"]), key=lambda p: p["start"])
    if not parts:
        return {}
    n, mean, m2, start = parts[0]["n"], parts[0]["mean"].copy(), parts[0]["m2"].copy(), parts[0]["start"]
    for p in parts[1:]:
        nb = p["n"]
        tot = n + nb
        delta = p["mean"] - mean
        mean += delta * (nb / tot)
        m2 += p["m2"] + delta * delta * (n * nb / tot)
        n = tot
    return {"n": n, "mean": mean, "m2": m2, "start": start}


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


class RMSF(Analysis):
    """Per-atom RMSF of ``select``, optionally after superposing ``fit_select`` on a reference.

    Parameters
    ----------
    select
        Atoms whose fluctuations are measured.
    reference, ref_frame
        Reference for the fit: an MDAnalysis Universe/AtomGroup at its ``ref_frame``, or the
        analysed trajectory's ``ref_frame`` (default).
    fit_select
        None (no fit: MDAnalysis's RMSF on coordinates as they are) or the atoms superposed on
        the reference in every frame first (``align.AlignTraj(..., select=fit_select)``).
    """

    name = "rmsf"
    formats = RMSFResult.formats
    per_frame = False

    def __init__(self, select: str = "all", reference=None, ref_frame: int = 0, fit_select: str | None = None):
        self.select, self.reference, self.ref_frame, self.fit_select = select, reference, int(ref_frame), fit_select

    def get_config(self) -> dict:
        return {"name": self.name, "select": self.select, "ref_frame": self.ref_frame, "fit_select": self.fit_select}

    def prepare(self, universe, source) -> Prepared:
        atoms, state = prepare_fit(universe, source, self.select, self.fit_select, self.reference, self.ref_frame)
        state.update(path=source.path, sel_atoms=universe.select_atoms(self.select).indices)
        return Prepared(atoms=atoms, state=state)

    def map(self, block: Block, prep: Prepared) -> dict:
        check_finite(block, block.positions, prep.state["path"])
        s = prep.state
        # Without a fit the block's float32 coordinates go to the kernel as they are (no float64 copy).
        m = moments(fitted(block.positions, s) if "fit" in s else block.positions[:, s["sel"]])
        m["start"] = block.start
        return m

    def reduce(self, partials: list[dict]) -> dict:
        return merge_moments(partials)

    def result(self, reduced: dict, prep: Prepared) -> RMSFResult:
        n = reduced.get("n", 0)
        atoms = prep.state["sel_atoms"]
        if not n:
            empty = np.full(len(atoms), np.nan)
            return RMSFResult(empty, np.full((len(atoms), 3), np.nan), atoms, 0)
        return RMSFResult(np.sqrt(reduced["m2"].sum(axis=1) / n), reduced["mean"], atoms, int(n))
