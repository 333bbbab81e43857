"""Backbone φ/ψ dihedral angles per frame, as ``MDAnalysis.analysis.dihedrals.Ramachandran`` computes them.

The residues are picked once per topology, from its per-atom names with NumPy, without a Universe when the
topology's labels are cached. The angles are computed for whole blocks of frames in float64, each bond vector
minimum-imaged in its frame's box, so any split of the frames gives the same bits.
"""

from __future__ import annotations

import numpy as np

from ..block import Block, check_finite, sorted_unique
from ..errors import SelectionError
from ..kernels.geometry import quad_dihedral_sincos, quad_dihedrals, safe_radius2, triclinic_vectors
from ..topology import select_atoms
from .base import Analysis, FrameRows, OneSelection, Prepared
from .options import NO_PBC, Command, Option
from .residues import atom_table, backbone_quintuples, derived, side_quadruples, topology_of
from .results import SERIES_OUT, Features, TimeSeries

#: The 27 lattice shifts (-1, 0, 1) per axis, the image search of MDAnalysis's triclinic minimum image.
_SHIFTS = np.array(np.meshgrid([-1, 0, 1], [-1, 0, 1], [-1, 0, 1], indexing="ij")).reshape(3, -1).T.astype(np.float64)


def minimum_image(d: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """(F, M, 3) float64 difference vectors moved to their shortest periodic image in each frame's box
    ((F, 6) MDAnalysis dimensions; a frame of zeros has no box and keeps its vectors).

    Triclinic boxes: rounded in fractional coordinates, then, where rounding may miss a shorter image, the
    shortest of the 27 neighbouring images, as MDAnalysis's ``_minimum_image_triclinic`` searches.
    """
    d = np.array(d, dtype=np.float64)
    dims = np.asarray(dims, np.float64).reshape(-1, 6)
    h = triclinic_vectors(dims)
    boxed = h[:, 0, 0] > 0
    ortho = boxed & (dims[:, 3:] == 90.0).all(axis=1)
    tric = boxed & ~ortho
    if ortho.any():
        L = dims[ortho, None, :3]
        d[ortho] -= L * np.round(d[ortho] / L)
    if tric.any():
        ht = h[tric]
        x = d[tric]
        frac = np.einsum("fmi,fij->fmj", x, np.linalg.inv(ht))
        x = np.einsum("fmi,fij->fmj", frac - np.round(frac), ht)
        far = (x * x).sum(axis=-1) >= safe_radius2(ht)[:, None]
        if far.any():
            f_idx, m_idx = np.nonzero(far)
            images = x[f_idx, m_idx][:, None, :] + np.einsum("sk,nkj->nsj", _SHIFTS, ht[f_idx])
            best = np.argmin((images * images).sum(axis=-1), axis=1)
            x[f_idx, m_idx] = images[np.arange(len(best)), best]
        d[tric] = x
    return d


def dihedral_angles(p1: np.ndarray, p2: np.ndarray, p3: np.ndarray, p4: np.ndarray,
                    dims: np.ndarray | None = None) -> np.ndarray:
    """(F, M) dihedral angles in radians, (-π, π], of the atom quadruples ``p1``-``p4`` (each (F, M, 3)),
    minimum image in ``dims`` (F, 6) where given: MDAnalysis's ``calc_dihedrals`` over a block."""
    f = p1.shape[0]
    bonds = np.stack([np.asarray(p2, np.float64) - p1, np.asarray(p3, np.float64) - p2,
                      np.asarray(p4, np.float64) - p3], axis=1)              # (F, 3, M, 3)
    if dims is not None:
        bonds = minimum_image(bonds.reshape(f, -1, 3), dims).reshape(bonds.shape)
    va, vb, vc = bonds[:, 0], bonds[:, 1], bonds[:, 2]
    n1, n2 = np.cross(va, vb), np.cross(vb, vc)
    x = (n1 * n2).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = (np.cross(n1, n2) * vb).sum(axis=-1) / np.linalg.norm(vb, axis=-1)
    return np.arctan2(y, x)


def _box_lengths(dims: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(F, 3) each frame's orthorhombic box edges for the compiled kernels (zeros: no box, or a triclinic
    one), (F,) which frames have a triclinic box, and ``dims`` as (F, 6) float64 (None where not given)."""
    lengths = np.zeros((n, 3))
    tric = np.zeros(n, bool)
    if dims is not None:
        dims = np.asarray(dims, np.float64).reshape(-1, 6)
        if (dims[:, 3:] == 90.0).all() and (dims[:, :3] > 0).all() and (dims[:, 2] < np.inf).all():
            # every frame a valid orthorhombic box (what triclinic_vectors finds valid: positive edges, the
            # last one finite), the case of most blocks: their lengths without building the box vectors
            lengths = np.array(dims[:, :3])
        else:
            boxed = triclinic_vectors(dims)[:, 0, 0] > 0
            ortho = boxed & (dims[:, 3:] == 90.0).all(axis=1)
            tric = boxed & ~ortho
            lengths[ortho] = dims[ortho, :3]
    return lengths, tric, dims


def block_dihedrals(x: np.ndarray, quad: np.ndarray, dims: np.ndarray | None = None) -> np.ndarray:
    """(F, M) dihedral angles in radians of the atom quadruples ``quad`` (4, M; indices into ``x``'s atoms,
    (F, A, 3)), minimum image in ``dims`` (F, 6) where given; each frame by its own box, so any split of the
    frames gives the same bits."""
    lengths, tric, dims = _box_lengths(dims, x.shape[0])
    out = quad_dihedrals(x, quad, lengths)
    if tric.any():
        xt = x[tric]
        out[tric] = dihedral_angles(*(xt[:, q] for q in quad), dims[tric])
    return out


def block_dihedral_sincos(x: np.ndarray, quad: np.ndarray, dims: np.ndarray | None = None) -> np.ndarray:
    """(F, M, 2) sine and cosine of :func:`block_dihedrals`' angles (the same arguments), compiled from the
    two arguments of each ``atan2`` where the box allows; equal to ``sin``/``cos`` of the angles to rounding."""
    lengths, tric, dims = _box_lengths(dims, x.shape[0])
    out = quad_dihedral_sincos(x, quad, lengths)
    if tric.any():
        xt = x[tric]
        angles = dihedral_angles(*(xt[:, q] for q in quad), dims[tric])
        out[tric] = np.stack([np.sin(angles), np.cos(angles)], axis=-1)
    return out


class Ramachandran(OneSelection, Analysis):
    """``r.angles``: (F, R, 2) backbone (φ, ψ) in degrees for the R residues MDAnalysis's ``Ramachandran`` keeps of
    ``select``, as its ``results.angles``; with ``sincos=True``, ``r.sincos``: (F, R, 4)
    ``(sin φ, cos φ, sin ψ, cos ψ)``. ``pbc`` minimum-images each bond in the frame's box, as MDAnalysis does when
    the frames have one (frames without a box are computed without it); ``pbc=False`` never uses the box.

    With ``omega`` or ``chi1``, each of those residues' ω (CA, C, N and CA of the next residue, as
    MDAnalysis's ``omega_selection``) and χ1 (N, CA, CB and CG, CG1, OG, OG1 or SG, as its
    ``chi1_selection``) follow its φ and ψ where the residue has them (glycine and alanine have no χ1), so
    the values are ``(F, features)``, residue by residue.

    The result is labelled features (:class:`~trajscale.analysis.results.Features`): ``r.array()`` is
    ``(F, features)``, ``r.feature_labels()`` names each (``phi``, ``sin(psi)``) with its residue.

    Parameters
    ----------
    select
        The residues (an MDAnalysis selection; its atoms' residues are taken, within the protein).
    sincos
        Sine and cosine of each angle instead of the angle.
    pbc
        Minimum image in each frame's box.
    omega, chi1
        Add each residue's ω, χ1 where it has them.
    """

    name = "ramachandran"
    command = Command("backbone phi/psi dihedrals per frame (as MDAnalysis's Ramachandran), or their sin/cos",
                      f"--out: {SERIES_OUT}",
                      (Option("select", "the residues (their backbone atoms are found as MDAnalysis does)"),
                       Option("sincos", "sin and cos of each angle (features for Markov models) instead of "
                                        "degrees", switch=True),
                       Option("omega", "add each residue's omega (CA, C, N, CA of the next)", switch=True),
                       Option("chi1", "add each residue's chi1 where it has one", switch=True),
                       NO_PBC))
    formats = TimeSeries.formats
    features = True

    def __init__(self, select: str = "protein", sincos: bool = False, pbc: bool = True, omega: bool = False,
                 chi1: bool = False) -> None:
        self.select, self.sincos, self.pbc = select, bool(sincos), bool(pbc)
        self.omega, self.chi1 = bool(omega), bool(chi1)

    def get_config(self) -> dict:
        return {"name": self.name, "select": self.select, "sincos": self.sincos, "pbc": self.pbc,
                "omega": self.omega, "chi1": self.chi1}

    @property
    def result_name(self) -> str:
        return "sincos" if self.sincos else "angles"

    def prepare(self, universe, source) -> Prepared:
        group = select_atoms(universe, self.select, "selection")
        indices = np.asarray(group.indices, np.int64)
        key = (self.select, self.omega, self.chi1, indices.tobytes())
        found = derived(universe, ("ramachandran", *key), lambda: self._backbone(universe, indices))
        labels = derived(universe, ("ramachandran labels", self.sincos, *key), lambda: self._labels(found["state"]))
        return Prepared(atoms=found["atoms"], state={**found["state"], "labels": labels, "path": source.path})

    def _backbone(self, universe, indices: np.ndarray) -> dict:
        """The atoms read and each angle's atoms and labels, for the residues of ``indices`` (computed once
        per topology): residue by residue, φ, ψ, then ω and χ1 where asked for and the residue has them."""
        protein = topology_of(universe).select_atoms("protein")
        table = atom_table(universe)
        try:
            quint, residues = backbone_quintuples(table, indices, np.asarray(protein.indices, np.int64))
        except ValueError as exc:
            raise SelectionError(f"selection {self.select!r}: {exc}") from None
        if not quint.shape[1]:
            raise SelectionError(f"selection {self.select!r} has no residue with both a phi and a psi angle "
                                 "(it needs protein residues with neighbours on both sides and atoms C, N, CA)")
        n = quint.shape[1]
        quads = np.stack([quint[0:4], quint[1:5]], axis=-1).reshape(4, 2 * n)   # φ, ψ of each residue
        place, kind = np.repeat(np.arange(n), 2), np.tile(np.array(["phi", "psi"]), n)
        extra, extra_place, extra_kind = side_quadruples(table, quint, self.omega, self.chi1)
        if len(extra_place):
            order = np.argsort(np.concatenate([place, extra_place]), kind="stable")
            quads = np.concatenate([quads, extra], axis=1)[:, order]
            place, kind = np.concatenate([place, extra_place])[order], np.concatenate([kind, extra_kind])[order]
        needed = sorted_unique(quads.ravel())
        resname, resid, segid = (a[residues][place] for a in table.residues())
        return {"atoms": needed, "state": {"quads": np.ascontiguousarray(np.searchsorted(needed, quads)),
                                           "n_residues": n, "kind": kind.astype(str), "resname": resname,
                                           "resid": resid, "chain": segid}}

    @property
    def _per_residue(self) -> bool:
        """The values keep MDAnalysis's shape (F, R, 2 or 4): φ and ψ alone."""
        return not (self.omega or self.chi1)

    def map(self, block: Block, prep: Prepared) -> FrameRows:
        s = prep.state
        check_finite(block, block.positions, s["path"])
        box = block.box if self.pbc else None
        if self.sincos:   # (sin, cos of each angle, in turn: straight from the kernel, no angle made first)
            values = block_dihedral_sincos(block.positions, s["quads"], box)
            f = len(values)
            values = values.reshape(f, -1)
        else:
            values = np.rad2deg(block_dihedrals(block.positions, s["quads"], box))
            f = len(values)
        if self._per_residue:
            values = values.reshape(f, s["n_residues"], -1)
        return FrameRows(block.frames, block.time, {self.result_name: values})

    def _labels(self, state: dict) -> dict[str, np.ndarray]:
        """Each feature's ``feature``, ``resname``, ``resid`` and ``chain`` (read-only: made once per topology,
        every member's results hold them)."""
        k = 2 if self.sincos else 1
        kind = np.asarray(state["kind"], dtype=str)
        if self.sincos:
            feature = np.stack([np.char.add(np.char.add("sin(", kind), ")"),
                                np.char.add(np.char.add("cos(", kind), ")")], axis=-1).reshape(-1)
        else:
            feature = np.array(kind)
        labels = {"feature": feature, "resname": np.repeat(np.asarray(state["resname"], dtype=str), k),
                  "resid": np.repeat(np.asarray(state["resid"], np.int64), k),
                  "chain": np.repeat(np.asarray(state["chain"], dtype=str), k)}
        for a in labels.values():
            a.setflags(write=False)
        return labels

    def result(self, reduced: FrameRows, prep: Prepared) -> Features:
        s = prep.state
        width = len(s["kind"]) * (2 if self.sincos else 1)
        empty = np.empty((0, s["n_residues"], width // s["n_residues"]) if self._per_residue else (0, width))
        labels = s.get("labels") or self._labels(s)
        return Features(reduced.frame, reduced.time, reduced.columns.get(self.result_name, empty), self.result_name,
                        **labels)
