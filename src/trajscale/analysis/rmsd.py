"""RMSD after optimal superposition, as ``MDAnalysis.analysis.rms.RMSD`` defines it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Union

import numpy as np

from ..block import Block, check_finite, finite_frames, frame_index, sorted_unique
from ..errors import ConfigError, SelectionError
from ..kernels.superpose import Reference, rmsd_after_transform, superpose_rmsd
from ..topology import select_atoms
from .base import Analysis, FrameRows, Prepared, check_finite_reference, has_masses, masses_of, positive_weights
from .options import REF_FRAME, Command, Option
from .results import SERIES, SERIES_OUT, output_format, save_as


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
    formats: ClassVar[tuple[str, ...]] = SERIES

    def table(self) -> np.ndarray:
        """Columns frame, time, rmsd, group rmsds (like MDAnalysis's ``results.rmsd``)."""
        return np.column_stack([self.frames, self.times, self.rmsd, self.groups])

    def to_csv(self, path) -> None:
        """The table as CSV, whatever ``path``'s extension."""
        self._write(path, ".csv")

    def save(self, path) -> None:
        """``.csv`` (columns frame, time, rmsd, groups), ``.npy`` (the same table), ``.h5``/``.hdf5``/``.npz``
        (arrays ``frames``, ``times``, ``rmsd``, ``groups`` and ``group_names``); any other extension is refused."""
        self._write(path, output_format(path, self.formats, "rmsd"))

    def _write(self, path, ext: str) -> None:
        header = ["frame", "time", "rmsd", *self.group_names]
        fmt = ["%d", "%.6g", "%.8f"] + ["%.8f"] * len(self.group_names)
        save_as(path, ext, table=(header, self.table(), fmt), npy=self.table(),
                arrays={"frames": self.frames, "times": self.times, "rmsd": self.rmsd, "groups": self.groups},
                attrs={"group_names": np.array(self.group_names, dtype=str)} if self.group_names else None)


@dataclass(frozen=True)
class RMSDState:
    """What ``prepare`` hands every worker (in :attr:`Prepared.state`); lives for one run.

    Indices are into the block's atoms (``Prepared.atoms``), not global.
    """

    fit: slice | np.ndarray              # the fit atoms
    ref: Reference                       # the fit's reference, centred and weighted once
    groups: tuple[np.ndarray, ...]       # each group selection's atoms
    ref_groups: tuple[np.ndarray, ...]   # (M, 3) float64 reference coordinates of each group
    group_weights: tuple[np.ndarray, ...]  # (M,) weights of each group's RMSD
    path: str                            # the trajectory, for error messages


#: What a config holds in place of a weights array: the array itself travels in the prepared state.
ARRAY = "array"

Selection = Union[str, tuple, Mapping[str, Union[str, Sequence[str]]]]
Weights = Union[None, str, np.ndarray, Sequence[float]]


class RMSD(Analysis):
    """RMSD of a selection after optimal superposition onto a reference.

    Arguments mean what they mean to ``MDAnalysis.analysis.rms.RMSD`` and give its numbers.

    Parameters
    ----------
    select
        Atoms to superimpose and measure: a selection string for both trajectory and reference, a
        ``(mobile, reference)`` tuple, or a dict with keys ``"mobile"`` and ``"reference"`` (each a string, a list
        of strings joined in order, or None for all atoms); None for all atoms on both sides. Default
        ``"protein and name CA"``, as ``trajscale run rmsd``'s (MDAnalysis's is ``"all"``: ``select="all"`` for it).
    ref_frame
        Frame used as reference (negative counts from the end): of the analysed
        trajectory, or of ``reference``'s trajectory when given (as in MDAnalysis).
    reference
        An MDAnalysis Universe or AtomGroup providing the reference coordinates; selections apply within it (within
        the group for an AtomGroup). ``select=None`` fits all atoms onto all of ``reference``.
    groupselections
        Further selections whose RMSD is reported after the fit on ``select`` (not refitted), as in MDAnalysis.
    weights
        None, ``"mass"`` or an array (one value per selected atom) for the fit.
    allow_nan
        Report NaN for frames with non-finite coordinates instead of failing.
    weights_groupselections
        False (groups take ``weights`` when it is None or ``"mass"``, none when it is
        an array), or one entry per group: None, ``"mass"`` or an array.
    tol_mass
        Trajectory and reference selections whose masses differ by more than this (per atom) are refused.

    Notes
    -----
    ``"array"`` in place of an array is what :meth:`get_config` records: the
    arrays themselves travel to workers in the prepared state.
    """

    name = "rmsd"
    command = Command("RMSD after optimal superposition",
                      "Time series of the RMSD of a selection after optimal superposition onto a reference "
                      f"frame (MDAnalysis rms.RMSD semantics). --out: {SERIES_OUT}",
                      (Option("select", "fit and RMSD selection"), REF_FRAME,
                       Option("groupselection", "extra group selection whose RMSD is reported after the fit "
                              "(repeatable)", keyword="groupselections", repeat=True, metavar="SEL"),
                       Option("mass-weighted", "mass-weighted fit and group RMSDs (MDAnalysis's weights='mass')",
                              keyword="weights", switch="mass"),
                       Option("allow-nan", "NaN for frames with non-finite coordinates", switch=True)))
    formats = RMSDResult.formats

    def __init__(self, select: Selection = "protein and name CA", ref_frame: int = 0, reference=None,
                 groupselections: Sequence[Selection] | None = (), weights: Weights = None,
                 allow_nan: bool = False, *, weights_groupselections: bool | Sequence[Weights] = False,
                 tol_mass: float = 0.1) -> None:
        self._select = _mobile_and_reference(select, "select")
        self.select = select
        self.ref_frame = int(ref_frame)
        self.reference = reference
        self.groupselections = tuple(groupselections or ())
        self._groups = [_mobile_and_reference(g, "groupselections") for g in self.groupselections]
        if any(None in g for g in self._groups):
            raise ConfigError("groupselections: each group needs a selection (None is only for select)")
        self.weights = _check_weights(weights, "weights")
        if isinstance(weights_groupselections, (bool, str)) and weights_groupselections is not False:
            raise ConfigError(f"weights_groupselections must be False or one entry per group, "
                              f"got {weights_groupselections!r}")
        if weights_groupselections is None or weights_groupselections is False or not len(weights_groupselections):
            weights_groupselections = False   # falsy, as MDAnalysis reads it: the rule of _group_weights
        elif len(weights_groupselections) != len(self.groupselections):
            raise ConfigError(f"weights_groupselections has {len(weights_groupselections)} entries but "
                              f"there are {len(self.groupselections)} groupselections")
        else:
            weights_groupselections = tuple(_check_weights(w, "weights_groupselections")
                                            for w in weights_groupselections)
        self.weights_groupselections = weights_groupselections
        self.tol_mass = float(tol_mass)
        self.allow_nan = allow_nan

    def get_config(self) -> dict:
        wg = self.weights_groupselections
        return {"name": self.name, "select": _selection_config(self.select), "ref_frame": self.ref_frame,
                "groupselections": [_selection_config(g) for g in self.groupselections],
                "weights": _weights_config(self.weights),
                "weights_groupselections": False if wg is False else [_weights_config(w) for w in wg],
                "tol_mass": self.tol_mass, "allow_nan": self.allow_nan}

    @property
    def selections(self) -> tuple[str, ...]:
        """The trajectory's side of ``select`` (``"all"`` for None) and of each group selection."""
        return tuple(s for mob, _ in [self._select, *self._groups] for s in (mob or ("all",)))

    @property
    def trajectory_frame(self) -> int | None:
        """The reference frame, when the reference is the analysed trajectory."""
        return None if self.reference is not None else self.ref_frame

    def prepare(self, universe, source) -> Prepared:
        """Resolve the selections and the reference; ``universe`` may be an AtomGroup to select within."""
        if universe is None:
            raise SelectionError(f"{source.path}: RMSD needs a topology to select atoms")
        # As MDAnalysis: `select` applies within the analysed atoms, group selections to their whole
        # Universe; the reference side selects within `reference` (the analysed atoms when there is none).
        mobile, u = universe, universe.universe
        (mob_sel, ref_sel), ref_atoms = self._select, (mobile if self.reference is None else self.reference)
        fit = mobile.atoms if mob_sel is None else select_atoms(mobile, mob_sel, "selection")
        if ref_atoms is mobile and ref_sel == mob_sel:
            ref_fit = fit   # the same selection on the same atoms: evaluated once
        else:
            ref_fit = ref_atoms.atoms if ref_sel is None else select_atoms(ref_atoms, ref_sel, "reference selection")
        _check_same_atoms(fit, ref_fit, mob_sel, ref_sel, self.tol_mass)
        groups, ref_groups = [], []
        for mob_g, ref_g in self._groups:
            groups.append(select_atoms(u, mob_g, "group selection"))
            ref_groups.append(select_atoms(ref_atoms, ref_g, "reference group selection"))
            _check_same_atoms(groups[-1], ref_groups[-1], mob_g, ref_g, None)
            if ref_atoms is not ref_atoms.universe:
                # MDAnalysis counts a group in the reference's Universe but takes its coordinates
                # within the reference AtomGroup; it fails unless both are the same atoms.
                whole = select_atoms(ref_atoms.universe, ref_g, "reference group selection")
                if whole.n_atoms != ref_groups[-1].n_atoms:
                    raise SelectionError(f"group selection {ref_g[0] if len(ref_g) == 1 else list(ref_g)!r} "
                                         f"selects {ref_groups[-1].n_atoms} atoms within the reference "
                                         f"AtomGroup but {whole.n_atoms} in its Universe; MDAnalysis refuses "
                                         "this: select atoms inside the group")
        w_fit, w_ref = _weights(self.weights, fit, "weights"), _weights(self.weights, ref_fit, "weights")
        w_groups = [_weights(w, g, "weights_groupselections")
                    for w, g in zip(self._group_weights(), groups, strict=False)]

        if self.reference is not None:
            ref_pos = _positions_at(self.reference.universe, self.ref_frame, [ref_fit, *ref_groups],
                                    finite=not self.allow_nan)
        else:
            frame = frame_index(self.ref_frame, source.n_frames, source.path)
            need = sorted_unique(np.concatenate([g.indices for g in [ref_fit, *ref_groups]]))
            block = source.read(frame, frame + 1, need)
            check_finite(block, block.positions, source.path)
            ref_pos = [block.positions[0][np.searchsorted(need, g.indices)] for g in [ref_fit, *ref_groups]]
        ref_pos = [p.astype(np.float64) for p in ref_pos]

        indices = [fit.indices] + [g.indices for g in groups]
        atoms = sorted_unique(np.concatenate(indices))
        local = [np.searchsorted(atoms, ix) for ix in indices]
        # The block holds only `atoms`; with no group selections the fit atoms are all of them.
        fit_all = np.array_equal(local[0], np.arange(len(atoms)))
        state = RMSDState(fit=slice(None) if fit_all else local[0], ref=Reference.of(ref_pos[0], w_fit, w_ref),
                          groups=tuple(local[1:]), ref_groups=tuple(ref_pos[1:]),
                          # ones for unweighted groups: the kernel then sums exactly as without weights
                          group_weights=tuple(np.ones(g.n_atoms) if w is None else w
                                              for w, g in zip(w_groups, groups, strict=False)),
                          path=source.path)
        return Prepared(atoms=atoms, state=state)

    def _group_weights(self) -> list:
        """Each group's weights, by MDAnalysis's rule when ``weights_groupselections`` is False."""
        if self.weights_groupselections is not False:
            return list(self.weights_groupselections)
        shared = self.weights if self.weights is None or isinstance(self.weights, str) else None
        return [shared] * len(self.groupselections)

    def map(self, block: Block, prep: Prepared) -> FrameRows:
        s: RMSDState = prep.state
        x = block.positions[:, s.fit]
        if not s.groups and isinstance(s.fit, slice):
            # The fit is every atom read, and the compiled kernel gives NaN exactly for frames
            # with a non-finite coordinate: no separate pass over the block when there is none.
            r = superpose_rmsd(x, s.ref)
            if not np.isnan(r).any():
                return FrameRows(block.frames, block.time, {"rmsd": r[:, None]})
        finite = finite_frames(block.positions)
        if not finite.all():
            if not self.allow_nan:
                check_finite(block, block.positions, s.path)
            ok = np.flatnonzero(finite)
        else:
            ok = slice(None)   # a view: no copy of the block
        out = np.full((block.n_frames, 1 + len(s.groups)), np.nan)
        if finite.any():
            if s.groups:
                r, rot, xcom, ycom = superpose_rmsd(x[ok], s.ref, want_rotation=True)
                for j, (g, ref_g, w) in enumerate(zip(s.groups, s.ref_groups, s.group_weights, strict=False)):
                    out[ok, 1 + j] = rmsd_after_transform(block.positions[ok][:, g], ref_g, rot, xcom, ycom, w)
            else:
                r = superpose_rmsd(x[ok], s.ref)
            out[ok, 0] = r
        return FrameRows(block.frames, block.time, {"rmsd": out})

    def result(self, reduced: FrameRows, prep: Prepared) -> RMSDResult:
        rmsd = reduced.columns.get("rmsd", np.empty((0, 1 + len(self.groupselections))))
        return RMSDResult(frames=reduced.frame, times=reduced.time, rmsd=rmsd[:, 0],
                          groups=rmsd[:, 1:], group_names=tuple(_label(g) for g in self.groupselections))


def _mobile_and_reference(select, what: str) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """MDAnalysis's ``process_selection``: (mobile strings, reference strings), None for all atoms."""
    def strings(sel) -> tuple[str, ...] | None:
        if sel is None:
            return None
        sel = (sel,) if isinstance(sel, str) else tuple(sel)
        if not sel or not all(isinstance(s, str) for s in sel):
            raise ConfigError(f"{what}: a selection must be a string or a list of strings, got {sel!r}")
        return sel

    if select is None or isinstance(select, str):
        return strings(select), strings(select)
    if isinstance(select, tuple) and len(select) == 2:
        return strings(select[0]), strings(select[1])
    if isinstance(select, Mapping) and {"mobile", "reference"} <= set(select):
        return strings(select["mobile"]), strings(select["reference"])
    raise ConfigError(f"{what}: expected a selection string, a (mobile, reference) tuple or a dict with "
                      f"keys 'mobile' and 'reference', got {select!r}")


def _selection_config(select) -> str | dict:
    """A selection as plain JSON values (a tuple becomes the equivalent dict)."""
    if select is None or isinstance(select, str):
        return select
    mob, ref = _mobile_and_reference(select, "select")
    return {"mobile": mob and list(mob), "reference": ref and list(ref)}


def _label(select) -> str:
    """A group's column name: its (mobile) selection."""
    return select if isinstance(select, str) else " + ".join(_mobile_and_reference(select, "select")[0])


def _check_weights(weights, what: str):
    """None, "mass", the config placeholder, or a 1-D array of finite numbers (as float64)."""
    if weights is None or (isinstance(weights, str) and weights in ("mass", ARRAY)):
        return weights
    if isinstance(weights, str):
        raise ConfigError(f"{what} must be None, 'mass' or an array, got {weights!r}")
    try:
        w = np.array(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be None, 'mass' or a 1-D array of numbers") from None
    if w.ndim != 1 or not np.isfinite(w).all() or w.sum() <= 0:
        raise ConfigError(f"{what} must be a 1-D array of finite numbers with a positive sum")
    return w


def _weights_config(weights) -> str | None:
    return weights if weights is None or isinstance(weights, str) else ARRAY


def _weights(weights, group, what: str) -> np.ndarray | None:
    """The float64 weights of ``group``'s atoms (masses for "mass"), or None."""
    if weights is None:
        return None
    if isinstance(weights, str):
        if weights == ARRAY:
            raise ConfigError(f"{what}={ARRAY!r} only stands for an array in a config; pass the array")
        return positive_weights(masses_of(group, f"{what}='mass' (--mass-weighted) needs",
                                          ", or leave --mass-weighted out for an unweighted fit"),
                                "masses", f"{what}='mass'")
    if len(weights) != group.n_atoms:
        raise ConfigError(f"{what} has {len(weights)} values but the selection has {group.n_atoms} atoms")
    return weights


def _describe(atom) -> str:
    return f"index {atom.index} ({atom.segid} {atom.resname} {atom.resid} {atom.name}, mass {atom.mass:.3f})"


def _check_same_atoms(mobile, ref, mob_sel, ref_sel, tol_mass: float | None) -> None:
    """Same atom count and, within ``tol_mass``, the same masses (MDAnalysis's rule)."""
    def show(sel):
        return "None (all atoms)" if sel is None else repr(sel[0] if len(sel) == 1 else list(sel))

    if mobile.n_atoms != ref.n_atoms:
        raise SelectionError(f"selection {show(mob_sel)} has {mobile.n_atoms} atoms in the trajectory but "
                             f"reference selection {show(ref_sel)} has {ref.n_atoms}")
    if tol_mass is None or mobile is ref or not (has_masses(mobile) and has_masses(ref)):
        return   # no masses, or the same atoms' (equal to themselves): nothing to compare
    bad = np.flatnonzero(np.abs(ref.masses - mobile.masses) > tol_mass)
    if len(bad):
        i = bad[0]
        raise SelectionError(f"selection {show(mob_sel)} and reference selection {show(ref_sel)}: masses differ "
                             f"by more than tol_mass={tol_mass:g} at {len(bad)} of {mobile.n_atoms} atoms, the "
                             f"first: trajectory {_describe(mobile[i])} vs reference {_describe(ref[i])}")


def _positions_at(universe, frame: int, groups, finite: bool = False) -> list[np.ndarray]:
    """Positions of ``groups`` at ``frame`` of ``universe``'s trajectory, which is left where it was;
    ``finite``: refuse NaN/inf among them."""
    traj = universe.trajectory
    frame = frame_index(frame, len(traj), f"the reference {getattr(traj, 'filename', None) or 'trajectory'}")
    current = traj.ts.frame
    try:
        traj[frame]
        positions = [g.positions.copy() for g in groups]
        if finite:
            check_finite_reference(positions, frame, traj)
        return positions
    finally:
        traj[current]
