"""Optional superposition of every frame onto a reference before an analysis (``fit_select``).

What MDAnalysis users do with ``align.AlignTraj(u, ref, select=fit_select)`` before
RMSF or an average structure, done per block instead of rewriting the trajectory.
"""

from __future__ import annotations

import numpy as np

from ..errors import FrameRangeError, SelectionError
from ..kernels.geometry import apply_fit
from ..kernels.superpose import Reference, superpose_rmsd
from ..sources.selection import select_atoms
from .base import check_finite


def reference_positions(universe, source, group_indices: np.ndarray, reference, ref_frame: int,
                        what: str) -> np.ndarray:
    """(N, 3) float64 positions of ``group_indices`` at ``ref_frame``: of ``reference`` (a Universe or
    AtomGroup, selected by the same indices) or of the analysed trajectory."""
    if reference is not None:
        ref_u = getattr(reference, "universe", reference)
        n = ref_u.trajectory.n_frames
        if not 0 <= ref_frame < n:
            raise FrameRangeError(f"reference frame {ref_frame} outside the reference's {n} frames")
        current = ref_u.trajectory.ts.frame
        ref_u.trajectory[ref_frame]
        pos = ref_u.atoms[group_indices].positions.astype(np.float64)
        ref_u.trajectory[current]
        return pos
    if not 0 <= ref_frame < source.n_frames:
        raise FrameRangeError(f"reference frame {ref_frame} outside the trajectory's {source.n_frames} "
                              f"frames ({source.path})")
    block = source.read(ref_frame, ref_frame + 1, np.asarray(group_indices))
    check_finite(block, block.positions, source.path)
    return block.positions[0].astype(np.float64)


def prepare_fit(universe, source, select: str, fit_select: str | None, reference, ref_frame: int):
    """Atoms to read and the state :func:`fitted` needs.

    Returns ``(atoms, state)``: ``atoms`` sorted global indices of the selection and fit atoms;
    ``state`` holds ``"sel"`` (indices into ``atoms``) and, with a fit, ``"fit"`` and ``"ref"``.
    """
    sel = select_atoms(universe, select, "selection")
    if fit_select is None:
        return sel.indices, {"sel": slice(None)}
    fit = select_atoms(universe, fit_select, "fit selection")
    atoms = np.union1d(sel.indices, fit.indices)
    ref = reference_positions(universe, source, fit.indices, reference, ref_frame, "fit")
    if ref.shape[0] != fit.n_atoms:
        raise SelectionError(f"fit selection {fit_select!r}: {fit.n_atoms} atoms in the trajectory, "
                             f"{ref.shape[0]} in the reference")
    return atoms, {"sel": np.searchsorted(atoms, sel.indices), "fit": np.searchsorted(atoms, fit.indices),
                   "ref": Reference.of(ref)}


def fitted(positions: np.ndarray, state: dict) -> np.ndarray:
    """(F, N, 3) float64 selection coordinates, superposed on the reference when there is a fit."""
    x = positions[:, state["sel"]]
    if "fit" not in state:
        return x.astype(np.float64)
    _, rot, xcom, ycom = superpose_rmsd(positions[:, state["fit"]], state["ref"], want_rotation=True)
    return apply_fit(x, rot, xcom, ycom)
