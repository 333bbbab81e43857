"""Radial distribution function between two selections, as ``MDAnalysis.analysis.rdf.InterRDF``.

Partials (a histogram of pair distances, the summed box volume and the frame count) add, so every split gives
the same counts; the compiled cell list repeats ``capped_distance``'s arithmetic, so the counts equal
``InterRDF``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..block import Block
from ..errors import BadCoordinatesError, ConfigError
from ..kernels.geometry import box_volume
from ..kernels.pairs import rdf_histogram
from ..kernels.sums import exact_sum, volume_of
from ..topology import select_atoms
from .base import Analysis, FrameCost, Prepared, TwoSelections, no_frames
from .options import Command, Option
from .results import arrays_of, output_format, save_as

NORMS = ("rdf", "density", "none")


@dataclass(frozen=True)
class RDFResult:
    """``bins`` (centres), ``edges``, ``count`` (pairs per bin, summed over frames) and ``rdf``."""

    bins: np.ndarray
    edges: np.ndarray
    count: np.ndarray
    rdf: np.ndarray
    n_frames: int
    report: object = None
    #: no .npy: bins, edges, counts and g(r) are several arrays of two lengths
    formats: ClassVar[tuple[str, ...]] = (".csv", ".h5", ".hdf5", ".npz")

    def save(self, path) -> None:
        """``.csv`` (columns r (the bin centre), rdf, count), ``.h5``/``.hdf5``/``.npz`` (arrays ``bins``,
        ``edges``, ``count``, ``rdf`` and ``n_frames``); any other extension is refused."""
        save_as(path, output_format(path, self.formats, "rdf"),
                table=(["r", "rdf", "count"], np.column_stack([self.bins, self.rdf, self.count]),
                       ["%.6g", "%.8g", "%.17g"]),
                arrays=arrays_of(self), attrs={"n_frames": self.n_frames})


class RDF(TwoSelections, Analysis):
    """g_AB(r) averaged over frames (parameters as ``InterRDF``).

    Parameters
    ----------
    select1, select2
        Selections A and B.
    nbins, range
        Histogram bins over ``range`` (Å).
    exclusion_block
        ``(nA, nB)``: pairs within the same block of nA atoms of A and nB of B are left out
        (e.g. ``(1, 1)`` for an RDF of a selection with itself).
    norm
        ``"rdf"`` (g(r)), ``"density"`` (single-particle density) or ``"none"`` (counts / frames).
    """

    name = "rdf"
    command = Command("radial distribution function (rdf.InterRDF)",
                      "--out: .csv (r, rdf, count), .h5/.hdf5/.npz (bins, edges, count, rdf)",
                      (Option("select1", "selection A", required=True), Option("select2", "selection B", required=True),
                       Option("nbins", "histogram bins", type=int),
                       Option("range", "distance range in Å", type=float, nargs=2, metavar=("MIN", "MAX")),
                       Option("exclusion-block", "leave out pairs within blocks of NA x NB atoms", type=int, nargs=2,
                              metavar=("NA", "NB")),
                       Option("norm", "normalisation, as InterRDF's norm", choices=("rdf", "density", "none"))))
    formats = RDFResult.formats
    per_frame = False
    needs_box = True

    def __init__(self, select1: str, select2: str, nbins: int = 75, range=(0.0, 15.0),
                 exclusion_block=None, norm: str = "rdf") -> None:
        norm = str(norm).lower()
        if norm not in NORMS:
            raise ConfigError(f"rdf norm must be one of {', '.join(NORMS)}, got {norm!r}")
        self.select1, self.select2, self.nbins = select1, select2, int(nbins)
        self.range = (float(range[0]), float(range[1]))
        # NumPy widens an empty range to +-0.5 and rejects no bins with a traceback: both refused here
        if self.nbins < 1:
            raise ConfigError(f"rdf needs at least one bin, got nbins={nbins}")
        if not 0 <= self.range[0] < self.range[1] < np.inf:
            raise ConfigError(f"rdf range must be 0 <= min < max (Å), got {self.range[0]:g} {self.range[1]:g}")
        self.exclusion_block = None if exclusion_block is None else tuple(int(x) for x in exclusion_block)
        if self.exclusion_block is not None and (len(self.exclusion_block) != 2 or min(self.exclusion_block) < 1):
            raise ConfigError(f"rdf exclusion_block must be two block sizes of at least 1 atom (nA, nB), "
                              f"got {exclusion_block!r}")
        self.norm = norm

    def get_config(self) -> dict:
        return {"name": self.name, "select1": self.select1, "select2": self.select2, "nbins": self.nbins,
                "range": list(self.range), "norm": self.norm,
                "exclusion_block": None if self.exclusion_block is None else list(self.exclusion_block)}

    def prepare(self, universe, source) -> Prepared:
        g1 = select_atoms(universe, self.select1, "select1")
        g2 = select_atoms(universe, self.select2, "select2")
        if self.norm == "rdf" and self._pairs(g1.n_atoms, g2.n_atoms) <= 0:
            raise ConfigError(f"rdf of {self.select1!r} ({g1.n_atoms} atoms) and {self.select2!r} "
                              f"({g2.n_atoms} atoms): no pair is left outside exclusion_block "
                              f"{self.exclusion_block}, so g(r) has no normalisation")
        atoms = np.union1d(g1.indices, g2.indices)
        return Prepared(atoms=atoms, state={"i1": np.searchsorted(atoms, g1.indices), "n1": g1.n_atoms,
                                            "i2": np.searchsorted(atoms, g2.indices), "n2": g2.n_atoms,
                                            "path": source.path})

    def frame_cost(self, prep: Prepared, source) -> FrameCost:
        """The pairs within the cut-off (InterRDF's ``N`` times the share of the first frame's box a sphere of
        ``range[1]`` fills): the kernel's work grows with them, not with the atoms read."""
        n_pairs = float(self._pairs(prep.state["n1"], prep.state["n2"]))
        volume = float(box_volume(source.read(0, 1, prep.atoms[:1]).box)[0]) if len(prep.atoms) else 0.0
        reach = 4 / 3 * np.pi * self.range[1] ** 3
        return FrameCost(atoms=len(prep.atoms), pairs=n_pairs * (min(1.0, reach / volume) if volume > 0 else 1.0))

    def map(self, block: Block, prep: Prepared) -> dict:
        s = prep.state
        return self._map(block, s["i1"], s["i2"], s["path"])

    def map_view(self, block: Block, prep: Prepared, view: np.ndarray) -> dict:
        """:meth:`map` of this analysis's atoms at ``view`` of a block read over more atoms (an
        :class:`~trajscale.analysis.group.AnalysisGroup`'s): the same partial, with no copy of the block."""
        s = prep.state
        return self._map(block, view[s["i1"]], view[s["i2"]], s["path"])

    def _map(self, block: Block, i1: np.ndarray, i2: np.ndarray, path) -> dict:
        # every frame has a box of non-zero volume (needs_box): the kernel counts them all, and marks
        # the frames where an atom of either selection is not finite (check_finite's frames)
        finite = np.ones(block.n_frames, bool)
        count, _ = rdf_histogram(block.positions, i1, i2, block.box, self.range[1],
                                 np.histogram_bin_edges(np.empty(0), bins=self.nbins, range=self.range),
                                 self.exclusion_block, finite=finite)
        if not finite.all():
            raise BadCoordinatesError(block.start + int(np.argmin(finite)), path)
        return {"count": count, "volume": exact_sum(box_volume(block.box), block.start, path),
                "n": block.n_frames}

    def _pairs(self, n1: int, n2: int) -> float:
        """Pairs of A and B counted per frame (InterRDF's ``N``): all, less those in exclusion blocks."""
        n_pairs = n1 * n2
        if self.exclusion_block:
            xa, xb = self.exclusion_block
            n_pairs -= xa * xb * (n1 / xa)
        return n_pairs

    def reduce(self, partials: list[dict]) -> dict:
        parts = [p for p in partials if p]
        if not parts:
            return {}
        # counts are whole numbers and volumes exact fixed-point integers: any split, the same bits
        return {"count": np.sum([p["count"] for p in parts], axis=0),
                "volume": sum(p["volume"] for p in parts), "n": sum(p["n"] for p in parts)}

    def result(self, reduced: dict, prep: Prepared) -> RDFResult:
        n = reduced.get("n", 0)
        if not n:
            raise no_frames(prep.state["path"], self.name)
        edges = np.histogram([-1], bins=self.nbins, range=self.range)[1]
        bins = 0.5 * (edges[:-1] + edges[1:])
        count = reduced["count"]
        norm = float(n)
        if self.norm in ("rdf", "density"):
            norm = norm * 4 / 3 * np.pi * np.diff(np.power(edges, 3))
        if self.norm == "rdf":   # every frame's volume is > 0 (needs_box), and so is the pair count (prepare)
            norm = norm * self._pairs(prep.state["n1"], prep.state["n2"]) / (volume_of(reduced["volume"]) / n)
        return RDFResult(bins, edges, count, count / norm, int(n))
