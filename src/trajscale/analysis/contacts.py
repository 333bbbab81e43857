"""Fraction of native contacts per frame, as ``MDAnalysis.analysis.contacts.Contacts``; and residue contacts
as labelled features: each residue pair's minimum distance between their atoms, or 1/0 under a cutoff."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..block import Block, check_finite, frame_index, sorted_unique
from ..errors import ConfigError
from ..kernels.geometry import distance_arrays, indexed_pair_distances
from ..topology import select_atoms
from .base import Analysis, FrameCost, FrameRows, MinimumImage, OneSelection, Prepared, check_boxes
from .fitting import reference_positions
from .options import NO_PBC, REF_FRAME, Command, Option
from .residues import atom_table, derived, narrowed
from .results import SERIES, SERIES_OUT, Features, TimeSeries, arrays_of, output_format, save_as

METHODS = ("hard_cut", "radius_cut")


@dataclass(frozen=True)
class ContactsResult:
    """``timeseries`` (F, 2): frame index and Q, as MDAnalysis's ``results.timeseries``."""

    frames: np.ndarray
    times: np.ndarray
    timeseries: np.ndarray
    n_initial_contacts: int
    report: object = None
    formats: ClassVar[tuple[str, ...]] = SERIES

    def save(self, path) -> None:
        """``.csv`` (columns frame, time, q), ``.npy`` (the same table), ``.h5``/``.hdf5``/``.npz`` (arrays
        ``frames``, ``times``, ``timeseries`` and ``n_initial_contacts``); any other extension is refused."""
        table = np.column_stack([self.frames, self.times, self.timeseries[:, 1]])
        save_as(path, output_format(path, self.formats, "contacts"),
                table=(["frame", "time", "q"], table, ["%d", "%.6g", "%.8g"]), npy=table,
                arrays=arrays_of(self), attrs={"n_initial_contacts": self.n_initial_contacts})


class Contacts(MinimumImage, Analysis):
    """Q(t) of the contacts between ``select[0]`` and ``select[1]`` formed in the reference.

    Parameters
    ----------
    select
        Two selections (A, B).
    radius
        Contacts in the reference are pairs closer than this (Å).
    method
        ``"hard_cut"`` (a contact counts while r <= its reference distance) or ``"radius_cut"``
        (while r <= ``radius``).
    reference, ref_frame
        Reference state (default: the trajectory's ``ref_frame``), as MDAnalysis's ``refgroup``.
    pbc
        Minimum-image distances (MDAnalysis's default): every frame, and the reference, must then have
        a periodic box (``needs_box``); ``pbc=False`` for a trajectory without periodic boundaries.
    """

    name = "contacts"
    command = Command("fraction of native contacts Q(t) (contacts.Contacts)", f"--out: {SERIES_OUT}",
                      (Option("select1", "selection A", keyword="select", required=True),
                       Option("select2", "selection B", keyword="select", required=True),
                       Option("radius", "contact radius in Å", type=float),
                       Option("method", "contact criterion, as Contacts' method", choices=("hard_cut", "radius_cut")),
                       REF_FRAME, NO_PBC))
    formats = ContactsResult.formats

    def __init__(self, select=("protein", "protein"), radius: float = 4.5, method: str = "hard_cut",
                 reference=None, ref_frame: int = 0, pbc: bool = True) -> None:
        if method not in METHODS:
            raise ConfigError(f"contacts method must be one of {', '.join(METHODS)}, got {method!r}")
        if len(select) != 2:
            raise ConfigError("contacts need two selections (A, B)")
        self.select, self.radius, self.method = tuple(select), float(radius), method
        self.reference, self.ref_frame, self.pbc = reference, int(ref_frame), bool(pbc)

    def get_config(self) -> dict:
        return {"name": self.name, "select": list(self.select), "radius": self.radius, "method": self.method,
                "ref_frame": self.ref_frame, "pbc": self.pbc}

    @property
    def selections(self) -> tuple[str, ...]:
        return self.select

    @property
    def trajectory_frame(self) -> int | None:
        """The frame whose contacts are native, when the reference is the analysed trajectory."""
        return None if self.reference is not None else self.ref_frame

    def prepare(self, universe, source) -> Prepared:
        ga = select_atoms(universe, self.select[0], "selection A")
        gb = select_atoms(universe, self.select[1], "selection B")
        ref_a = reference_positions(source, ga, self.select[0], self.reference, self.ref_frame, "A")
        ref_b = reference_positions(source, gb, self.select[1], self.reference, self.ref_frame, "B")
        box = None
        if self.pbc:
            box = self._reference_box(source)
        r0 = distance_arrays(ref_a[None], ref_b[None], box)[0]
        native = r0 <= self.radius
        if not native.any():   # Q = contacts kept / contacts in the reference: 0 / 0
            raise ConfigError(f"contacts: no pair of {self.select[0]!r} and {self.select[1]!r} is within "
                              f"radius {self.radius:g} Å in the reference, so Q has no value; choose a larger "
                              "radius or other selections")
        atoms = np.union1d(ga.indices, gb.indices)
        cutoff = r0[native] if self.method == "hard_cut" else np.full(native.sum(), self.radius)
        # Only the native pairs are measured in each frame (a few % of the full A x B matrix).
        na, nb = np.nonzero(native)
        return Prepared(atoms=atoms, state={"pa": np.searchsorted(atoms, ga.indices)[na],
                                            "pb": np.searchsorted(atoms, gb.indices)[nb], "native": native,
                                            "cutoff": cutoff, "path": source.path})

    def _reference_box(self, source) -> np.ndarray:
        """(1, 6) the reference frame's box; MissingBoxError if it has none, or one of zero volume."""
        if self.reference is not None:
            traj = self.reference.universe.trajectory
            current = traj.ts.frame
            frame = frame_index(self.ref_frame, traj.n_frames, "the reference")
            dims = traj[frame].dimensions
            box = np.zeros((1, 6)) if dims is None else np.array(dims, np.float64)[None]   # a copy: ts moves on
            traj[current]
            check_boxes(box, [frame], getattr(traj, "filename", None) or "the reference", self.name)
            return box
        frame = frame_index(self.ref_frame, source.n_frames, source.path)
        block = source.read(frame, frame + 1, np.array([0]))
        check_boxes(block.box, block.frames, source.path, self.name)
        return np.array(block.box, np.float64)

    def block_bytes_per_frame(self, prep: Prepared) -> int:
        """The pair distances' copies per frame (~136 bytes a pair: tens of thousands of pairs take far more
        than the frame read)."""
        return 136 * len(prep.state["pa"])

    def map(self, block: Block, prep: Prepared) -> FrameRows:
        s = prep.state
        check_finite(block, block.positions, s["path"])
        box = block.box if self.pbc else None   # every frame has one (needs_box)
        r = indexed_pair_distances(block.positions, s["pa"], s["pb"], box)
        q = (r <= s["cutoff"]).sum(axis=1) / r.shape[1]   # at least one native contact (prepare)
        return FrameRows(block.frames, block.time, {"q": q})

    def result(self, reduced: FrameRows, prep: Prepared) -> ContactsResult:
        q = reduced.columns.get("q", np.empty(0))
        return ContactsResult(reduced.frame, reduced.time, np.column_stack([reduced.frame, q]),
                              int(prep.state["native"].sum()))


class ResidueContacts(MinimumImage, OneSelection, Analysis):
    """``r.contacts``: (F, P) per frame, for each pair of residues of ``select`` at least ``min_separation``
    apart (in residue index), the minimum distance between their selected atoms in Å (MDTraj's
    ``compute_contacts`` scheme ``closest-heavy`` with the default selection, which leaves out hydrogens
    by name), or with ``cutoff`` 1.0 where that distance is within it and 0.0 elsewhere.

    The result is labelled features (:class:`~trajscale.analysis.results.Features`): ``r.feature_labels()``
    names each pair ``"LYS 12 - ASP 87"`` (residue name and number; with the chains where the selection
    has several), with the first residue's name, number and chain.

    Parameters
    ----------
    select
        The atoms whose residues are paired (their residues are MDAnalysis's).
    cutoff
        Å: a contact (1.0) where the minimum distance is at most this; None gives the distances.
    min_separation
        Residue pairs closer than this in residue index are left out (3: neighbours i+1 and i+2 are).
    pbc
        Minimum-image distances: every frame must then have a periodic box (``needs_box``); ``pbc=False``
        for a trajectory without periodic boundaries.
    """

    name = "residue_contacts"
    command = Command("residue pairs' minimum distances (or 0/1 contacts under --cutoff) per frame, labelled",
                      f"--out: {SERIES_OUT}",
                      (Option("select", "the atoms whose residues are paired (default: protein heavy atoms)"),
                       Option("cutoff", "Å: 1/0 contacts instead of distances", type=float),
                       Option("min-separation", "leave out residue pairs closer in sequence", type=int),
                       NO_PBC))
    formats = TimeSeries.formats
    features = True

    def __init__(self, select: str = "protein and not name H*", cutoff: float | None = None,
                 min_separation: int = 3, pbc: bool = True) -> None:
        if cutoff is not None and not float(cutoff) > 0:
            raise ConfigError(f"residue contacts' cutoff must be a positive distance in Å, got {cutoff!r}")
        if int(min_separation) < 1:
            raise ConfigError(f"residue contacts' min_separation must be at least 1, got {min_separation!r}")
        self.select, self.pbc = select, bool(pbc)
        self.cutoff = None if cutoff is None else float(cutoff)
        self.min_separation = int(min_separation)

    def get_config(self) -> dict:
        return {"name": self.name, "select": self.select, "cutoff": self.cutoff,
                "min_separation": self.min_separation, "pbc": self.pbc}

    def prepare(self, universe, source) -> Prepared:
        group = select_atoms(universe, self.select, "selection")
        indices = np.asarray(group.indices, np.int64)
        state = derived(universe, ("residue_contacts", self.min_separation, indices.tobytes()),
                        lambda: _residue_pairs(universe, indices, self.min_separation))
        if not len(state["starts"]):
            raise ConfigError(f"residue contacts: {self.select!r} has no two residues at least "
                              f"{self.min_separation} apart")
        return Prepared(atoms=state["atoms"], state={**state, "path": source.path})

    def block_bytes_per_frame(self, prep: Prepared) -> int:
        """The atom pairs' copies per frame (as :class:`Contacts`: ~136 bytes a pair)."""
        return 136 * len(prep.state["pa"])

    def frame_cost(self, prep: Prepared, source) -> FrameCost:
        return FrameCost(atoms=len(prep.atoms), pairs=float(len(prep.state["pa"])))

    def map(self, block: Block, prep: Prepared) -> FrameRows:
        s = prep.state
        check_finite(block, block.positions, s["path"])
        box = block.box if self.pbc else None   # every frame has one (needs_box)
        d = indexed_pair_distances(block.positions, s["pa"], s["pb"], box)
        nearest = np.minimum.reduceat(d, s["starts"], axis=1)
        values = nearest if self.cutoff is None else (nearest <= self.cutoff).astype(np.float64)
        return FrameRows(block.frames, block.time, {"contacts": values})

    def result(self, reduced: FrameRows, prep: Prepared) -> Features:
        s = prep.state
        values = reduced.columns.get("contacts", np.empty((0, len(s["starts"]))))
        return Features(reduced.frame, reduced.time, values, "contacts", feature=s["feature"],
                        resname=s["resname"], resid=s["resid"], chain=s["chain"], pair=True)


def _residue_pairs(universe, indices: np.ndarray, min_separation: int) -> dict:
    """Every atom pair of every residue pair at least ``min_separation`` apart, grouped by residue pair
    (``starts``: where each pair's atom pairs begin), and each residue pair's label; once per topology."""
    table = atom_table(universe)
    res = table.resindex[indices]
    order = np.argsort(res, kind="stable")
    atoms_by_res = indices[order]
    ordered = res[order]
    first = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1]))) if len(ordered) else ordered
    residues, count = ordered[first], np.diff(np.append(first, len(ordered)))
    i, j = np.triu_indices(len(residues), k=1)
    keep = residues[j] - residues[i] >= min_separation
    i, j = i[keep], j[keep]
    n_pairs = count[i] * count[j]
    starts = np.concatenate([[0], np.cumsum(n_pairs)[:-1]]).astype(np.int64) if len(i) else np.empty(0, np.int64)
    pair_of = np.repeat(np.arange(len(i)), n_pairs)
    k = np.arange(int(n_pairs.sum())) - starts[pair_of]
    a = atoms_by_res[first[i][pair_of] + k // count[j][pair_of]]
    b = atoms_by_res[first[j][pair_of] + k % count[j][pair_of]]
    atoms = sorted_unique(np.concatenate([a, b])) if len(a) else np.empty(0, np.int64)
    name, number, segid = (v[residues] for v in table.residues())
    words = np.strings.add(np.strings.add(name, " "), number.astype(str))
    if len(set(segid.tolist())) > 1:
        words = np.strings.add(np.strings.add(words, " "), segid)
    words = narrowed(words)
    return {"atoms": atoms, "pa": np.searchsorted(atoms, a), "pb": np.searchsorted(atoms, b), "starts": starts,
            "feature": np.strings.add(words[i], np.strings.add(" - ", words)[j]), "resname": name[i],
            "resid": number[i], "chain": segid[i]}
