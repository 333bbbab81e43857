"""Radial distribution function between two selections, as ``MDAnalysis.analysis.rdf.InterRDF``.

Each block's partial is a histogram of pair distances plus the summed box
volume and frame count; partials add, so every split gives the same counts.
Pairs within the range come from a compiled cell list over all the block's frames
(:mod:`trajscale.kernels.pairs`), which repeats ``capped_distance``'s arithmetic
so the counts equal ``InterRDF``'s, with a box or without one; MDAnalysis's
``capped_distance`` (once per frame) remains for frames whose box is not valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..block import Block
from ..errors import ConfigError
from ..kernels.geometry import box_volume
from ..kernels.pairs import rdf_histogram
from ..kernels.sums import exact_sum, volume_of
from ..topology import select_atoms
from .base import Analysis, Prepared, check_finite
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


class RDF(Analysis):
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
    formats = RDFResult.formats
    per_frame = False

    def __init__(self, select1: str, select2: str, nbins: int = 75, range=(0.0, 15.0),
                 exclusion_block=None, norm: str = "rdf") -> None:
        norm = str(norm).lower()
        if norm not in NORMS:
            raise ConfigError(f"rdf norm must be one of {', '.join(NORMS)}, got {norm!r}")
        self.select1, self.select2, self.nbins = select1, select2, int(nbins)
        self.range = (float(range[0]), float(range[1]))
        self.exclusion_block = None if exclusion_block is None else tuple(int(x) for x in exclusion_block)
        self.norm = norm

    def get_config(self) -> dict:
        return {"name": self.name, "select1": self.select1, "select2": self.select2, "nbins": self.nbins,
                "range": list(self.range), "norm": self.norm,
                "exclusion_block": None if self.exclusion_block is None else list(self.exclusion_block)}

    def prepare(self, universe, source) -> Prepared:
        g1 = select_atoms(universe, self.select1, "select1")
        g2 = select_atoms(universe, self.select2, "select2")
        atoms = np.union1d(g1.indices, g2.indices)
        return Prepared(atoms=atoms, state={"i1": np.searchsorted(atoms, g1.indices), "n1": g1.n_atoms,
                                            "i2": np.searchsorted(atoms, g2.indices), "n2": g2.n_atoms,
                                            "path": source.path})

    def map(self, block: Block, prep: Prepared) -> dict:
        s = prep.state
        check_finite(block, block.positions, s["path"])
        edges = self._edges()
        x = block.positions
        count, done = rdf_histogram(x, s["i1"], s["i2"], block.box, self.range[1], edges, self.exclusion_block)
        for f in np.flatnonzero(~done):   # a box that is not valid: MDAnalysis's search per frame
            count += self._capped_histogram(x[f, s["i1"]], x[f, s["i2"]], block.box[f])
        return {"count": count, "volume": exact_sum(box_volume(block.box)), "n": block.n_frames}

    def _edges(self) -> np.ndarray:
        return np.histogram_bin_edges(np.empty(0), bins=self.nbins, range=self.range)

    def _capped_histogram(self, a: np.ndarray, b: np.ndarray, box: np.ndarray) -> np.ndarray:
        from MDAnalysis.lib.distances import capped_distance

        pairs, dist = capped_distance(a, b, self.range[1], box=box if box.any() else None)
        if self.exclusion_block is not None:
            dist = dist[pairs[:, 0] // self.exclusion_block[0] != pairs[:, 1] // self.exclusion_block[1]]
        return np.histogram(dist, bins=self.nbins, range=self.range)[0]

    def reduce(self, partials: list[dict]) -> dict:
        parts = [p for p in partials if p]
        if not parts:
            return {}
        # counts are whole numbers and volumes exact fixed-point integers: any split, the same bits
        return {"count": np.sum([p["count"] for p in parts], axis=0),
                "volume": sum(p["volume"] for p in parts), "n": sum(p["n"] for p in parts)}

    def result(self, reduced: dict, prep: Prepared) -> RDFResult:
        edges = np.histogram([-1], bins=self.nbins, range=self.range)[1]
        bins = 0.5 * (edges[:-1] + edges[1:])
        n = reduced.get("n", 0)
        count = reduced.get("count", np.zeros(self.nbins))
        norm = float(n)
        if self.norm in ("rdf", "density"):
            norm = norm * 4 / 3 * np.pi * np.diff(np.power(edges, 3))
        if self.norm == "rdf":
            n_pairs = prep.state["n1"] * prep.state["n2"]
            if self.exclusion_block:
                xa, xb = self.exclusion_block
                n_pairs -= xa * xb * (prep.state["n1"] / xa)
            norm = norm * n_pairs / (volume_of(reduced.get("volume", 0)) / n) if n else norm
        with np.errstate(divide="ignore", invalid="ignore"):
            rdf = count / norm
        return RDFResult(bins, edges, count, rdf, int(n))
