"""Box representations: H5MD edge vectors and MDAnalysis's [a, b, c, alpha, beta, gamma]."""

from __future__ import annotations

import numpy as np


def edges_to_dimensions(edges: np.ndarray) -> np.ndarray:
    """H5MD box edges, (F, 3) diagonal or (F, 3, 3) row vectors, to (F, 6) [a b c alpha beta gamma]."""
    edges = np.asarray(edges, dtype=np.float64)
    if edges.ndim == 2:   # (F, 3) cuboid
        out = np.zeros((edges.shape[0], 6))
        out[:, :3] = edges
        out[:, 3:] = 90.0
        return out.astype(np.float32)
    a, b, c = edges[:, 0], edges[:, 1], edges[:, 2]
    la, lb, lc = (np.linalg.norm(v, axis=1) for v in (a, b, c))

    def angle(u, v, lu, lv):
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = np.einsum("ij,ij->i", u, v) / (lu * lv)
        return np.degrees(np.arccos(np.clip(np.nan_to_num(cos), -1, 1)))

    out = np.stack([la, lb, lc, angle(b, c, lb, lc), angle(a, c, la, lc), angle(a, b, la, lb)], axis=1)
    out[la == 0] = 0.0
    return out.astype(np.float32)


def dimensions_to_edges(dims: np.ndarray) -> np.ndarray:
    """(F, 6) box dimensions to (F, 3, 3) triclinic vectors (MDAnalysis convention).

    ``MDAnalysis.lib.mdamath.triclinic_vectors`` for every row at once (an NPT
    run has a distinct box per frame): the same exact right angles, and zero
    vectors for an invalid box (an edge or angle not positive, an angle of 180
    degrees or more, angles that close no cell).
    """
    dims = np.asarray(dims, dtype=np.float64).reshape(-1, 6)
    a, b, c = dims[:, 0], dims[:, 1], dims[:, 2]
    alpha, beta, gamma = dims[:, 3], dims[:, 4], dims[:, 5]

    def cos(angle):   # exactly 0 at 90 degrees, as MDAnalysis
        return np.where(angle == 90.0, 0.0, np.cos(np.deg2rad(angle)))

    cos_a, cos_b, cos_g = cos(alpha), cos(beta), cos(gamma)
    sin_g = np.where(gamma == 90.0, 1.0, np.sin(np.deg2rad(gamma)))
    out = np.zeros((dims.shape[0], 3, 3), dtype=np.float64)
    out[:, 0, 0] = a
    out[:, 1, 0] = b * cos_g
    out[:, 1, 1] = b * sin_g
    out[:, 2, 0] = c * cos_b
    with np.errstate(divide="ignore", invalid="ignore"):
        out[:, 2, 1] = c * (cos_a - cos_b * cos_g) / sin_g
        out[:, 2, 2] = np.sqrt(c * c - out[:, 2, 0] ** 2 - out[:, 2, 1] ** 2)
    valid = (dims > 0).all(axis=1) & (alpha < 180) & (beta < 180) & (gamma < 180)
    valid &= out[:, 2, 2] > 0   # NaN (a negative discriminant) compares False too
    out[~valid] = 0.0
    return out.astype(np.float32)
