"""Box representations: H5MD edge vectors and MDAnalysis's [a, b, c, alpha, beta, gamma]."""

from __future__ import annotations

import numpy as np

from .kernels.geometry import triclinic_vectors


def edges_to_dimensions(edges: np.ndarray) -> np.ndarray:
    """H5MD box edges, (F, 3) diagonal or (F, 3, 3) row vectors, to (F, 6) [a b c alpha beta gamma]."""
    edges = np.asarray(edges, dtype=np.float64)
    if edges.ndim == 2:   # (F, 3) cuboid
        out = np.zeros((edges.shape[0], 6))
        out[:, :3] = edges
        out[:, 3:] = 90.0
        return out.astype(np.float32)
    if edges.shape[1:] == (3, 3) and not (edges - edges * np.eye(3)).any():
        return _diagonal(edges)
    a, b, c = edges[:, 0], edges[:, 1], edges[:, 2]
    la, lb, lc = (np.linalg.norm(v, axis=1) for v in (a, b, c))

    def angle(u, v, lu, lv):
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = np.einsum("ij,ij->i", u, v) / (lu * lv)
        return np.degrees(np.arccos(np.clip(np.nan_to_num(cos), -1, 1)))

    out = np.stack([la, lb, lc, angle(b, c, lb, lc), angle(a, c, la, lc), angle(a, b, la, lb)], axis=1)
    out[la == 0] = 0.0
    return out.astype(np.float32)


#: The angle between two vectors whose dot product is zero, as the general path computes it (arccos of 0 in
#: degrees): the bits of a diagonal box's angles (a zero or non-finite cosine is made 0 there too).
_RIGHT = np.degrees(np.arccos(np.clip(np.nan_to_num(np.zeros(1)), -1, 1)))[0]


def _diagonal(edges: np.ndarray) -> np.ndarray:
    """:func:`edges_to_dimensions` of all-diagonal vectors: the same bits as the general path, far cheaper."""
    out = np.empty((edges.shape[0], 6))
    out[:, :3] = np.abs(np.diagonal(edges, axis1=1, axis2=2))
    out[:, 3:] = _RIGHT
    out[out[:, 0] == 0] = 0.0
    return out.astype(np.float32)


def dimensions_to_edges(dims: np.ndarray) -> np.ndarray:
    """(F, 6) box dimensions to (F, 3, 3) float32 triclinic vectors, as MDAnalysis's ``triclinic_vectors`` per row."""
    return triclinic_vectors(dims).astype(np.float32)
