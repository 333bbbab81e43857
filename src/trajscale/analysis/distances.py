"""Per-frame distances between two selections, with minimum image (orthorhombic and triclinic), each labelled
with its two atoms (``"CA 12 - CA 87"``: atom name and residue number; with the chains where they differ)."""

from __future__ import annotations

import numpy as np

from ..block import Block, check_finite, sorted_unique
from ..errors import SelectionError
from ..kernels.geometry import distance_arrays, pair_distances
from ..topology import select_atoms
from .base import Analysis, FrameRows, MinimumImage, Prepared, TwoSelections
from .options import NO_PBC, Command, Option
from .residues import atom_table, atom_words, derived
from .results import SERIES_OUT, Features, TimeSeries


class Distances(MinimumImage, TwoSelections, Analysis):
    """``r.distances``: (F, N) between atom i of ``select1`` and atom i of ``select2`` (``pairs=True``,
    as ``MDAnalysis.lib.distances.calc_bonds``), or (F, N1, N2) all distances (``pairs=False``, as
    ``distance_array``). ``pairs=None`` picks pairs when the selections have equal sizes.
    ``pbc`` uses the frame's box (minimum image), as MDAnalysis does when given ``box=``; every frame must
    then have one (``needs_box``): ``pbc=False`` for a trajectory without periodic boundaries.

    The result is labelled features (:class:`~trajscale.analysis.results.Features`): ``r.array()`` is
    ``(F, N)`` (or ``(F, N1 * N2)``, row-major) and ``r.feature_labels()`` names each pair ``"CA 12 - CA 87"``,
    with the first atom's residue.
    """

    name = "distances"
    command = Command("per-frame distances between two selections (minimum image)", f"--out: {SERIES_OUT}",
                      (Option("select1", "selection A", required=True), Option("select2", "selection B", required=True),
                       Option("all-pairs", "all distances (N1 x N2) even when the selections have equal sizes",
                              keyword="pairs", switch=False),
                       NO_PBC))
    formats = TimeSeries.formats
    features = True

    def __init__(self, select1: str, select2: str, pairs: bool | None = None, pbc: bool = True) -> None:
        self.select1, self.select2, self.pairs, self.pbc = select1, select2, pairs, bool(pbc)

    def get_config(self) -> dict:
        return {"name": self.name, "select1": self.select1, "select2": self.select2, "pairs": self.pairs,
                "pbc": self.pbc}

    def prepare(self, universe, source) -> Prepared:
        g1 = select_atoms(universe, self.select1, "select1")
        g2 = select_atoms(universe, self.select2, "select2")
        pairs = (g1.n_atoms == g2.n_atoms) if self.pairs is None else self.pairs
        if pairs and g1.n_atoms != g2.n_atoms:
            raise SelectionError(f"pairwise distances need equal selections: {self.select1!r} has "
                                 f"{g1.n_atoms} atoms, {self.select2!r} {g2.n_atoms}")
        i1, i2 = np.asarray(g1.indices, np.int64), np.asarray(g2.indices, np.int64)
        state = derived(universe, ("distances", pairs, i1.tobytes(), i2.tobytes()),
                        lambda: _pair_state(universe, i1, i2, pairs))
        return Prepared(atoms=state["atoms"], state={**state, "pairs": pairs, "path": source.path})

    def map(self, block: Block, prep: Prepared) -> FrameRows:
        s = prep.state
        check_finite(block, block.positions, s["path"])
        a, b = block.positions[:, s["i1"]], block.positions[:, s["i2"]]
        box = block.box if self.pbc else None
        d = pair_distances(a, b, box) if s["pairs"] else distance_arrays(a, b, box)
        return FrameRows(block.frames, block.time, {"distances": d})

    def result(self, reduced: FrameRows, prep: Prepared) -> Features:
        s = prep.state
        shape = (0, len(s["i1"])) if s["pairs"] else (0, len(s["i1"]), len(s["i2"]))
        return Features(reduced.frame, reduced.time, reduced.columns.get("distances", np.empty(shape)), "distances",
                        feature=s["feature"], resname=s["resname"], resid=s["resid"], chain=s["chain"], pair=True)


def _pair_state(universe, i1: np.ndarray, i2: np.ndarray, pairs: bool) -> dict:
    """The atoms read, each selection's positions among them, and each distance's label (once per topology)."""
    atoms = sorted_unique(np.concatenate([i1, i2]))
    table = atom_table(universe)
    a, b = (i1, i2) if pairs else (np.repeat(i1, len(i2)), np.tile(i2, len(i1)))
    chains = len(set(table.segid[np.concatenate([i1, i2])].tolist())) > 1
    feature = np.strings.add(np.strings.add(atom_words(table, a, chains), " - "), atom_words(table, b, chains))
    return {"atoms": atoms, "i1": np.searchsorted(atoms, i1), "i2": np.searchsorted(atoms, i2), "feature": feature,
            "resname": table.resname[a], "resid": table.resid[a], "chain": table.segid[a]}
