"""RMSD after optimal superposition, as ``MDAnalysis.analysis.rms.RMSD`` defines it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..block import Block
from ..errors import FrameRangeError, SelectionError
from ..kernels.superpose import Reference, preload_kernels, rmsd_after_transform, superpose_rmsd
from ..sources.selection import select_atoms
from .base import Analysis, Prepared, check_finite, finite_frames


@dataclass(frozen=True)
class RMSDResult:
    """Per-frame RMSD (Å).

    Attributes
    ----------
    frames, times
        Global frame indices and times (ps).
    rmsd
        RMSD of the fit selection, one value per frame.
    groups
        (n_frames, n_groups) RMSD of each group selection after the fit.
    """

    frames: np.ndarray
    times: np.ndarray
    rmsd: np.ndarray
    groups: np.ndarray
    group_names: tuple[str, ...]
    report: object = None

    def table(self) -> np.ndarray:
        """Columns frame, time, rmsd, group rmsds (like MDAnalysis's ``results.rmsd``)."""
        return np.column_stack([self.frames, self.times, self.rmsd, self.groups])

    def to_csv(self, path) -> None:
        from ..util import atomic_output

        header = ",".join(["frame", "time", "rmsd", *self.group_names])
        fmt = ["%d", "%.6g", "%.8f"] + ["%.8f"] * len(self.group_names)
        with atomic_output(path) as tmp:
            np.savetxt(tmp, self.table(), delimiter=",", header=header, comments="", fmt=fmt)


class RMSD(Analysis):
    """RMSD of a selection after optimal superposition onto a reference.

    Parameters
    ----------
    select
        Atoms to superimpose and measure (MDAnalysis selection).
    ref_frame
        Frame used as reference: of the analysed trajectory, or of
        ``reference``'s trajectory when given (as in MDAnalysis).
    reference
        An MDAnalysis Universe or AtomGroup providing the reference
        coordinates; the same ``select`` is applied to it.
    groupselections
        Further selections whose RMSD is reported after the fit on ``select``
        (not refitted), as in MDAnalysis.
    weights
        None or ``"mass"`` for the fit.
    allow_nan
        Report NaN for frames with non-finite coordinates instead of failing.
    """

    name = "rmsd"

    def __init__(self, select: str = "protein and name CA", ref_frame: int = 0, reference=None,
                 groupselections: list[str] | tuple[str, ...] = (), weights: str | None = None,
                 allow_nan: bool = False) -> None:
        if weights not in (None, "mass"):
            raise SelectionError(f"weights must be None or 'mass', got {weights!r}")
        self.select = select
        self.ref_frame = int(ref_frame)
        self.reference = reference
        self.groupselections = tuple(groupselections)
        self.weights = weights
        self.allow_nan = allow_nan

    def get_config(self) -> dict:
        return {"name": self.name, "select": self.select, "ref_frame": self.ref_frame,
                "groupselections": list(self.groupselections), "weights": self.weights,
                "allow_nan": self.allow_nan}

    def prepare(self, universe, source) -> Prepared:
        fit = select_atoms(universe, self.select, "selection")
        groups = [select_atoms(universe, g, "group selection") for g in self.groupselections]
        indices = [fit.indices] + [g.indices for g in groups]
        atoms = np.unique(np.concatenate(indices))
        local = [np.searchsorted(atoms, ix) for ix in indices]
        if self.reference is not None:
            ref_u = getattr(self.reference, "universe", self.reference)
            ref_fit = select_atoms(ref_u, self.select, "reference selection")
            ref_groups = [select_atoms(ref_u, g, "reference group selection") for g in self.groupselections]
            if ref_fit.n_atoms != fit.n_atoms or any(a.n_atoms != b.n_atoms for a, b in zip(ref_groups, groups)):
                raise SelectionError(f"selection {self.select!r} has {fit.n_atoms} atoms in the trajectory "
                                     f"but {ref_fit.n_atoms} in the reference")
            # As MDAnalysis: the reference is taken at ref_frame of its own trajectory.
            current = ref_u.trajectory.ts.frame
            ref_u.trajectory[self.ref_frame]
            ref_pos = [g.positions.astype(np.float64) for g in [ref_fit, *ref_groups]]
            ref_u.trajectory[current]
        else:
            if not 0 <= self.ref_frame < source.n_frames:
                raise FrameRangeError(f"reference frame {self.ref_frame} outside the trajectory's "
                                      f"{source.n_frames} frames ({source.path})")
            block = source.read(self.ref_frame, self.ref_frame + 1, atoms)
            check_finite(block, block.positions, source.path)
            ref_pos = [block.positions[0][ix].astype(np.float64) for ix in local]
        masses = fit.masses.astype(np.float64) if self.weights == "mass" else None
        # The block holds only `atoms`; with no group selections the fit atoms are all of them.
        fit_all = np.array_equal(local[0], np.arange(len(atoms)))
        state = {"fit": slice(None) if fit_all else local[0], "groups": local[1:],
                 "ref": Reference.of(ref_pos[0], masses), "ref_groups": ref_pos[1:], "path": source.path}
        return Prepared(atoms=atoms, state=state)

    def map(self, block: Block, prep: Prepared) -> dict:
        s = prep.state
        x = block.positions[:, s["fit"]]
        if not s["groups"] and preload_kernels():
            # The compiled kernel gives NaN exactly for frames with a non-finite coordinate:
            # no separate pass over the block when (as usual) there is none.
            r = superpose_rmsd(x, s["ref"])
            if not np.isnan(r).any():
                return {"frame": block.frames, "time": block.time, "rmsd": r[:, None]}
        finite = finite_frames(block.positions)
        if not finite.all():
            if not self.allow_nan:
                check_finite(block, block.positions, s["path"])
            ok = np.flatnonzero(finite)
        else:
            ok = slice(None)   # a view: no copy of the block
        out = np.full((block.n_frames, 1 + len(s["groups"])), np.nan)
        if finite.any():
            if s["groups"]:
                r, rot, xcom, ycom = superpose_rmsd(x[ok], s["ref"], want_rotation=True)
                for j, (g, ref_g) in enumerate(zip(s["groups"], s["ref_groups"])):
                    out[ok, 1 + j] = rmsd_after_transform(block.positions[ok][:, g], ref_g, rot, xcom, ycom)
            else:
                r = superpose_rmsd(x[ok], s["ref"])
            out[ok, 0] = r
        return {"frame": block.frames, "time": block.time, "rmsd": out}

    def result(self, reduced: dict, prep: Prepared) -> RMSDResult:
        rmsd = reduced.get("rmsd", np.empty((0, 1 + len(self.groupselections))))
        return RMSDResult(frames=reduced.get("frame", np.empty(0, np.int64)),
                          times=reduced.get("time", np.empty(0)), rmsd=rmsd[:, 0],
                          groups=rmsd[:, 1:], group_names=tuple(self.groupselections))
