"""Optional superposition of every frame onto a reference before an analysis (``fit_select``), per block, as
MDAnalysis users do with ``align.AlignTraj`` before RMSF or an average structure."""

from __future__ import annotations

import numpy as np

from ..block import check_finite, frame_index
from ..errors import SelectionError
from ..kernels.geometry import apply_fit
from ..kernels.sums import frame_sums, shift_of
from ..kernels.superpose import Reference, superpose_rmsd
from ..topology import select_atoms
from .base import Prepared, check_finite_reference

#: Bytes of float64 coordinates a fit moves at once (:func:`fitted_sums`): its copies of the selection
#: (picked, widened, centred, rotated) are made this many bytes at a time, whatever the block's size.
FIT_BYTES = 4 * 1024**2


class Fitted:
    """An accumulating analysis of ``select``'s atoms, superposed on a reference by ``fit_select``'s when given."""

    @property
    def selections(self) -> tuple[str, ...]:
        return (self.select,) if self.fit_select is None else (self.select, self.fit_select)

    def prepare_fitted(self, universe, source, fit_select: str | None) -> Prepared:
        """The fit's state, with the selection's atoms and the shift its fixed-point sums are taken from: its
        coordinates in the trajectory's frame 0 (fitted), the same on every worker."""
        atoms, state = prepare_fit(universe, source, self.select, fit_select, self.reference, self.ref_frame)
        first = np.array(source.read(0, 1, atoms).positions, copy=True)
        state.update(path=source.path, sel_atoms=universe.select_atoms(self.select).indices,
                     shift=shift_of(fitted(first, state)[0]))
        return Prepared(atoms=atoms, state=state)


def reference_positions(source, group, selection: str, reference, ref_frame: int, what: str) -> np.ndarray:
    """(N, 3) float64 reference positions for ``group`` (the trajectory's ``selection``) at ``ref_frame``
    (negative: from the end) of ``reference`` (a Universe or AtomGroup, the selection made within it, as
    MDAnalysis does), else of the analysed trajectory."""
    if reference is not None:
        ref_group = select_atoms(reference, selection, f"reference {what} selection")
        if ref_group.n_atoms != group.n_atoms:
            raise SelectionError(f"{what} selection {selection!r}: {group.n_atoms} atoms in the trajectory, "
                                 f"{ref_group.n_atoms} in the reference")
        traj = ref_group.universe.trajectory
        frame = frame_index(ref_frame, traj.n_frames, "the reference")
        current = traj.ts.frame
        traj[frame]
        pos = ref_group.positions.astype(np.float64)
        traj[current]
        check_finite_reference([pos], frame, traj)
        return pos
    frame = frame_index(ref_frame, source.n_frames, source.path)
    block = source.read(frame, frame + 1, np.asarray(group.indices))
    check_finite(block, block.positions, source.path)
    return block.positions[0].astype(np.float64)


def prepare_fit(universe, source, select: str, fit_select: str | None, reference, ref_frame: int):
    """``(atoms, state)``: the sorted global indices of the selection and fit atoms, and what :func:`fitted`
    needs (``"sel"``: indices into ``atoms``; with a fit, ``"fit"`` and ``"ref"``)."""
    sel = select_atoms(universe, select, "selection")
    if fit_select is None:
        return sel.indices, {"sel": slice(None)}
    fit = select_atoms(universe, fit_select, "fit selection")
    atoms = np.union1d(sel.indices, fit.indices)
    ref = reference_positions(source, fit, fit_select, reference, ref_frame, "fit")
    return atoms, {"sel": np.searchsorted(atoms, sel.indices), "fit": np.searchsorted(atoms, fit.indices),
                   "ref": Reference.of(ref)}


def fitted(positions: np.ndarray, state: dict) -> np.ndarray:
    """(F, N, 3) float64 selection coordinates, superposed on the reference when there is a fit."""
    x = positions[:, state["sel"]]
    if "fit" not in state:
        return x.astype(np.float64)
    _, rot, xcom, ycom = superpose_rmsd(positions[:, state["fit"]], state["ref"], want_rotation=True)
    return apply_fit(x, rot, xcom, ycom)


def fitted_sums(positions: np.ndarray, state: dict, shift: np.ndarray, squares: bool = True,
                frames: np.ndarray | None = None, source: str = "") -> np.ndarray:
    """:func:`~trajscale.kernels.sums.frame_sums` of the :func:`fitted` selection of (F, N, 3) ``positions``.

    With a fit, the frames are moved :data:`FIT_BYTES` of float64 coordinates at a time and their integer
    sums added (the same words as the whole block at once), so the fit's copies stay a few MB.
    """
    if "fit" not in state:
        return frame_sums(positions[:, state["sel"]], shift, squares, frames=frames, source=source)
    n_sel = len(shift)
    step = max(1, FIT_BYTES // max(1, n_sel * 3 * 8))
    words = None
    frames = np.arange(len(positions)) if frames is None else np.asarray(frames)
    for i in range(0, max(1, len(positions)), step):
        part = frame_sums(fitted(positions[i:i + step], state), shift, squares, frames=frames[i:i + step],
                          source=source)
        if words is None:
            words = part
        else:
            words += part
    return words
