"""Histograms of the pair distances within a cut-off, batched over a block's frames (RDF partials).

The pairs and distances are those of ``MDAnalysis.lib.distances.capped_distance`` as
``InterRDF`` calls it, bin for bin: a numba cell list (:mod:`._numba_pairs`) finds the
candidates, and each candidate's distance is computed with MDAnalysis's own float32
wrapping, minimum image and inclusion test for the method MDAnalysis would pick
(grid search or brute force). Frames without a valid box, or everything when numba
is missing, are left to the caller (``capped_distance`` per frame).
"""

from __future__ import annotations

import numpy as np

from .geometry import _numba_module, perpendicular_widths, safe_radius2, triclinic_vectors

#: Most cells of a frame's grid per atom of the searched selection (a fine grid costs more than it saves).
MAX_CELLS_PER_ATOM = 2


def mdanalysis_method_is_brute_force(n1: int, n2: int, cutoff: float, dims: np.ndarray,
                                     box9: np.ndarray) -> np.ndarray:
    """(F,) True where ``capped_distance`` picks brute force over its grid (``_determine_method``)."""
    if n1 < 10 or n2 < 10:
        return np.ones(len(dims), bool)
    if n1 * n2 >= 1e8:
        return np.zeros(len(dims), bool)
    ortho = (dims[:, 3:] == 90.0).all(axis=1)
    vec = box9.reshape(-1, 3, 3)
    size = np.where(ortho[:, None], dims[:, :3], vec.max(axis=1) - vec.min(axis=1))   # float32, as MDAnalysis's
    return np.any(cutoff > np.float32(0.3) * size, axis=1)


def grid(box9: np.ndarray, cutoff: float, n_atoms: int) -> np.ndarray:
    """(F, 3) cells per box vector: each at least ``cutoff`` thick (plus 1e-3 Å), 1 where fewer than 3 fit."""
    widths = perpendicular_widths(box9.reshape(-1, 3, 3).astype(np.float64))
    n = np.floor(widths / (cutoff + 1e-3)).astype(np.int64)
    total = n.prod(axis=1).astype(np.float64)
    limit = max(27, MAX_CELLS_PER_ATOM * n_atoms)
    shrink = np.maximum(1.0, (total / limit) ** (1 / 3))
    n = np.floor(n / shrink[:, None]).astype(np.int64)
    return np.where(n < 3, 1, n)


def rdf_histogram(x: np.ndarray, i1: np.ndarray, i2: np.ndarray, dims: np.ndarray, cutoff: float,
                  edges: np.ndarray, exclusion_block=None) -> tuple[np.ndarray, np.ndarray] | None:
    """Pair-distance histogram of atoms ``i1`` against atoms ``i2`` of (F, N, 3) ``x`` over the frames with a box.

    The atoms are gathered inside the kernel, frame by frame (no (F, n, 3) copies of
    the selections). Returns ``(counts, done)``: counts (len(edges) - 1,) summed over
    the frames ``done`` (F,) marks, or None when numba is not installed.
    """
    k = _numba_module("_numba_pairs")
    if k is None:
        return None
    dims = np.asarray(dims, np.float32).reshape(-1, 6)
    box9 = triclinic_vectors(dims).astype(np.float32).reshape(-1, 9)
    done = box9[:, 0] > 0
    counts = np.zeros(len(edges) - 1, np.int64)
    i1, i2 = np.asarray(i1, np.int64), np.asarray(i2, np.int64)
    if done.any() and len(i1) and len(i2):
        xa, xb = exclusion_block or (0, 0)
        k.rdf_histogram(np.ascontiguousarray(x, np.float32), i1, i2, np.flatnonzero(done), box9, dims,
                        ~(dims[:, 3:] == 90.0).all(axis=1),
                        mdanalysis_method_is_brute_force(len(i1), len(i2), cutoff, dims, box9),
                        grid(box9, cutoff, len(i2)), safe_radius2(box9.reshape(-1, 3, 3).astype(np.float64)),
                        float(cutoff), np.asarray(edges, np.float64), int(xa), int(xb), counts)
    return counts.astype(np.float64), done
