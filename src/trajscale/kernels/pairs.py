"""Histograms of the pair distances within a cut-off, batched over a block's frames (RDF partials).

The pairs and distances are those of ``MDAnalysis.lib.distances.capped_distance`` as ``InterRDF`` calls it, bin
for bin: a compiled cell list finds the candidates, and each distance is computed with MDAnalysis's own float32
wrapping, minimum image and inclusion test for the method it would pick.
"""

from __future__ import annotations

import numpy as np

from . import _pairs
from .geometry import perpendicular_widths, safe_radius2, triclinic_vectors

#: Most cells of a frame's grid per atom of the selection it holds, for cells a cut-off thick or more (a box
#: that would hold more gets thicker cells).
MAX_CELLS_PER_ATOM = 2
#: Cells per cut-off of the sorted search of a periodic box (each cell a half cut-off thick: its 5 x 5 x 5
#: neighbour cells hold about half the candidates of 3 x 3 x 3 cells a cut-off thick).
CELLS_PER_CUTOFF = 2
#: Most of those finer cells per atom of the grid's selection: past it most rows of neighbour cells are empty
#: and each looking atom's 25 rows cost more than the candidates they save, so the cells are a cut-off thick
#: instead (never finer cells made thicker: searched 2 cells out, they reach too far).
MAX_FINE_CELLS_PER_ATOM = 8


def mdanalysis_method_is_brute_force(n1: int, n2: int, cutoff: float, dims: np.ndarray,
                                     box9: np.ndarray, extent: np.ndarray | None = None,
                                     nobox: np.ndarray | None = None) -> np.ndarray:
    """(F,) True where ``capped_distance`` picks brute force over its grid (``_determine_method``).

    ``extent``: (F, 3) float32 span of both selections' coordinates, used for the frames
    ``nobox`` marks (``box=None``), as MDAnalysis does.
    """
    if n1 < 10 or n2 < 10:
        return np.ones(len(dims), bool)
    if n1 * n2 >= 1e8:
        return np.zeros(len(dims), bool)
    ortho = (dims[:, 3:] == 90.0).all(axis=1)
    vec = box9.reshape(-1, 3, 3)
    size = np.where(ortho[:, None], dims[:, :3], vec.max(axis=1) - vec.min(axis=1))   # float32, as MDAnalysis's
    if extent is not None:
        size = np.where(nobox[:, None], extent, size)
    return np.any(cutoff > np.float32(0.3) * size, axis=1)


def pseudo_boxes(x: np.ndarray, i1: np.ndarray, i2: np.ndarray, cutoff: float) -> tuple[np.ndarray, np.ndarray,
                                                                                           np.ndarray]:
    """``_nsgrid_capped``'s set-up without a box, for each frame of (F, N, 3) float32 ``x``: the span of
    both selections (F, 3), the shift subtracted from their coordinates (F, 3) and the pseudo-box's
    edge (F,), all float32 and computed as MDAnalysis computes them."""
    lmin = np.minimum(x[:, i1].min(axis=1), x[:, i2].min(axis=1))
    lmax = np.maximum(x[:, i1].max(axis=1), x[:, i2].max(axis=1))
    shift = lmin - 0.1 * cutoff
    size = np.maximum((lmax - lmin).max(axis=1), 2 * cutoff)
    return lmax - lmin, shift, size + 2.2 * cutoff


def grid(widths: np.ndarray, cutoff: float, n_atoms: int) -> np.ndarray:
    """(F, 3) cells per box vector of boxes (F, 3) ``widths`` apart (:func:`.perpendicular_widths`): each at
    least ``cutoff`` thick (plus 1e-3 Å) and at most :data:`MAX_CELLS_PER_ATOM` per atom (thicker where more
    would fit), 1 where fewer than 3 fit (a neighbour cell would be met twice)."""
    n = np.floor(widths / (cutoff + 1e-3)).astype(np.int64)
    total = n.prod(axis=1).astype(np.float64)
    limit = max(27, MAX_CELLS_PER_ATOM * n_atoms)
    shrink = np.maximum(1.0, (total / limit) ** (1 / 3))
    n = np.floor(n / shrink[:, None]).astype(np.int64)
    return np.where(n < 3, 1, n)


def search_grids(box9: np.ndarray, cutoff: float, n_atoms: int, grid_search: np.ndarray) -> tuple[np.ndarray,
                                                                                                    np.ndarray]:
    """Each frame's cells (F, 3) and cells per cut-off (F,) for a grid of ``n_atoms`` atoms in boxes (F, 9):
    :data:`CELLS_PER_CUTOFF` where ``grid_search`` (a periodic box that MDAnalysis searches on its grid), the
    box fits that many cells a cut-off thick on every axis (5 or more each) and they are at most
    :data:`MAX_FINE_CELLS_PER_ATOM` per atom, else 1 where it fits 3 cells a cut-off thick or more on every
    axis (:func:`grid`), else 0 (``_frame``'s search, which also takes thin boxes)."""
    widths = perpendicular_widths(box9.reshape(-1, 3, 3).astype(np.float64))
    coarse = grid(widths, cutoff, n_atoms)
    fine = np.floor(CELLS_PER_CUTOFF * widths / (cutoff + 1e-3)).astype(np.int64)
    use_fine = (grid_search & (fine >= 2 * CELLS_PER_CUTOFF + 1).all(axis=1)
                & (fine.prod(axis=1) <= MAX_FINE_CELLS_PER_ATOM * n_atoms))
    per_cutoff = np.where(use_fine, CELLS_PER_CUTOFF, np.where(grid_search & (coarse > 1).all(axis=1), 1, 0))
    return np.ascontiguousarray(np.where(use_fine[:, None], fine, coarse), np.int64), per_cutoff.astype(np.int64)


def grid_holds_first(n1: int, n2: int) -> bool:
    """Whether the first selection makes the cell grid and the second looks into it: where it is the larger
    (a grid atom costs a vectorised wrap, a looking atom a scalar wrap and its rows of neighbour cells).
    The pairs and their distances are the same either way (every step's rounding is symmetric)."""
    return n1 > n2


def rdf_histogram(x: np.ndarray, i1: np.ndarray, i2: np.ndarray, dims: np.ndarray, cutoff: float,
                  edges: np.ndarray, exclusion_block=None, finite: np.ndarray | None = None) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
    """Pair-distance histogram of atoms ``i1`` against atoms ``i2`` of (F, N, 3) ``x`` over the frames with a box
    (gathered inside the kernel; ``x`` as float32, the precision MDAnalysis computes in).

    Returns ``(counts, done)``: counts (len(edges) - 1,) summed over the frames ``done`` (F,) marks.
    ``finite``: an (F,) bool array in which the frames of ``done`` with a NaN or infinite coordinate among
    the atoms are set False (and left out of the counts).  Raises ValueError for a shape that is not
    (F, N, 3), too few edges, or atom indices outside ``x``.
    """
    x = np.ascontiguousarray(x, np.float32)   # a no-op for the blocks sources hand out
    if x.ndim != 3 or x.shape[2] != 3:
        raise ValueError(f"positions must be (frames, atoms, 3), got shape {x.shape}")
    dims = np.ascontiguousarray(np.asarray(dims, np.float32).reshape(-1, 6))
    if len(dims) != len(x):
        raise ValueError(f"{len(dims)} boxes for {len(x)} frames")
    edges = np.ascontiguousarray(edges, np.float64)
    if edges.ndim != 1 or len(edges) < 2:
        raise ValueError("edges must be at least 2 bin edges")
    i1 = np.ascontiguousarray(i1, np.int64)
    i2 = np.ascontiguousarray(i2, np.int64)
    for idx in (i1, i2):
        if len(idx) and (idx.min() < 0 or idx.max() >= x.shape[1]):
            raise ValueError(f"atom indices must lie in [0, {x.shape[1]})")
    box9 = triclinic_vectors(dims).astype(np.float32).reshape(-1, 9)
    nobox = (dims == 0).all(axis=1)
    done = (box9[:, 0] > 0) | nobox
    counts = np.zeros(len(edges) - 1, np.int64)
    if not (done.any() and len(i1) and len(i2)):
        return counts.astype(np.float64), done
    shift = np.zeros((len(x), 3), np.float32)
    extent = None
    if nobox.any():   # the pseudo-box stands in for the box: it sets the grid, never wraps (pbc off)
        extent = np.zeros((len(x), 3), np.float32)
        extent[nobox], shift[nobox], edge = pseudo_boxes(x[nobox], i1, i2, float(cutoff))
        dims = dims.copy()
        dims[nobox] = np.stack([edge, edge, edge] + [np.full_like(edge, 90.0)] * 3, axis=1)
        box9[nobox] = triclinic_vectors(dims[nobox]).astype(np.float32).reshape(-1, 9)
    xa, xb = exclusion_block or (0, 0)
    brute = mdanalysis_method_is_brute_force(len(i1), len(i2), cutoff, dims, box9, extent, nobox)
    if grid_holds_first(len(i1), len(i2)):   # the kernel's grid is made of its second selection
        i1, i2, xa, xb = i2, i1, xb, xa
    ncells, per_cutoff = search_grids(box9, float(cutoff), len(i2), ~brute & ~nobox)
    _pairs.rdf_histogram(x, i1, i2, np.flatnonzero(done).astype(np.int64), box9, dims,
                         (~(dims[:, 3:] == 90.0).all(axis=1)).view(np.uint8), brute.view(np.uint8), ncells,
                         np.ascontiguousarray(safe_radius2(box9.reshape(-1, 3, 3).astype(np.float64))),
                         (~nobox).view(np.uint8), shift, float(cutoff), edges, int(xa), int(xb), counts, per_cutoff,
                         np.zeros(0, np.uint8) if finite is None else finite.view(np.uint8))
    return counts.astype(np.float64), done
