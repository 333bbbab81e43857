"""Geometry batched over the frames of a block: boxes, minimum-image distances, centres.

Every function takes whole blocks ``(F, N, 3)`` and boxes ``(F, 6)`` (MDAnalysis's
``[a, b, c, alpha, beta, gamma]``; all zeros = no box) and works in float64.
"""

from __future__ import annotations

import numpy as np

from . import _geometry


def triclinic_vectors(dims: np.ndarray) -> np.ndarray:
    """(F, 6) box dimensions to (F, 3, 3) float64 row vectors, as ``MDAnalysis.lib.mdamath.triclinic_vectors``
    (exact right angles; zero vectors for a box that closes no cell)."""
    dims = np.asarray(dims, dtype=np.float64).reshape(-1, 6)
    a, b, c = dims[:, 0], dims[:, 1], dims[:, 2]
    ang = dims[:, 3:]
    right = ang == 90.0
    cos = np.where(right, 0.0, np.cos(np.radians(ang)))
    sin_g = np.where(right[:, 2], 1.0, np.sin(np.radians(ang[:, 2])))
    cos_a, cos_b, cos_g = cos[:, 0], cos[:, 1], cos[:, 2]
    out = np.zeros((len(dims), 3, 3))
    out[:, 0, 0] = a
    out[:, 1, 0] = b * cos_g
    out[:, 1, 1] = b * sin_g
    out[:, 2, 0] = c * cos_b
    with np.errstate(divide="ignore", invalid="ignore"):
        out[:, 2, 1] = c * (cos_a - cos_b * cos_g) / sin_g
        out[:, 2, 2] = np.sqrt(c * c - out[:, 2, 0] ** 2 - out[:, 2, 1] ** 2)
    valid = (dims > 0).all(axis=1) & (ang < 180).all(axis=1)
    valid &= out[:, 2, 2] > 0   # NaN (a negative discriminant) compares False too
    out[~valid] = 0.0
    return out


def perpendicular_widths(h: np.ndarray) -> np.ndarray:
    """(F, 3) distances between opposite faces of (F, 3, 3) box vectors (volume / face area)."""
    h = np.asarray(h, np.float64).reshape(-1, 3, 3)
    vol = np.abs(np.linalg.det(h))
    faces = np.stack([np.cross(h[:, 1], h[:, 2]), np.cross(h[:, 2], h[:, 0]), np.cross(h[:, 0], h[:, 1])], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(vol[:, None] > 0, vol[:, None] / np.linalg.norm(faces, axis=-1), 0.0)


def safe_radius2(h: np.ndarray) -> np.ndarray:
    """(F,) squared radius below which a vector is its own shortest periodic image: every lattice vector is
    at least the box's smallest perpendicular width W long, so W / 2 (less 1e-6, so rounding never decides)."""
    return (0.5 * perpendicular_widths(h).min(axis=1)) ** 2 * (1.0 - 1e-6)


def box_volume(dims: np.ndarray) -> np.ndarray:
    """(F,) volumes of (F, 6) boxes (0 without a box)."""
    vec = triclinic_vectors(dims)
    return np.abs(np.linalg.det(vec))


def _wrap(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """(F, N, 3) coordinates moved into the primary cell of each frame's box vectors ``h`` (F, 3, 3)."""
    frac = np.einsum("fni,fij->fnj", x, np.linalg.inv(h))
    frac -= np.floor(frac)
    return np.einsum("fni,fij->fnj", frac, h)


def _native(x: np.ndarray) -> np.ndarray:
    """``x`` as native-endian C-contiguous float32 or float64 (float32 is not widened), copied only if needed."""
    x = np.asarray(x)
    dtype = x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    return np.ascontiguousarray(x, dtype=dtype.newbyteorder("="))


def _distances(a: np.ndarray, b: np.ndarray, dims: np.ndarray | None, pairs: bool) -> np.ndarray:
    """(F, N) pair or (F, N, M) all distances, batched over frames, MDAnalysis's minimum-image convention:
    triclinic boxes by the shortest of the 27 neighbouring images after wrapping, as ``calc_distances.h``
    (not always the global minimum for unreduced boxes, but MDAnalysis's answer is the one users compare with).
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    shape = a.shape[:2] if pairs else (a.shape[0], a.shape[1], b.shape[1])
    out = np.empty(shape)
    dims = np.zeros((a.shape[0], 6)) if dims is None else np.asarray(dims, np.float64).reshape(-1, 6)
    right = (dims[:, 3:] == 90.0).all(axis=1)
    vec = None if right.all() else triclinic_vectors(dims)   # (right angles: positive edges, the last finite)
    boxed = ((dims[:, :3] > 0).all(axis=1) & (dims[:, 2] < np.inf)) if vec is None else vec[:, 0, 0] > 0
    ortho = boxed & right
    tric = boxed & ~ortho

    def diff(sel):
        return a[sel] - b[sel] if pairs else a[sel][:, :, None, :] - b[sel][:, None, :, :]

    for sel, box in ((~boxed, None), (ortho, dims[:, :3])):
        if sel.any():
            d = diff(sel)
            if box is not None:
                L = box[sel].reshape((-1,) + (1,) * (d.ndim - 2) + (3,))
                d -= L * np.round(d / L)
            out[sel] = np.sqrt((d * d).sum(axis=-1))
    if tric.any():
        h = np.ascontiguousarray(vec[tric])
        aw, bw = _wrap(a[tric], h), _wrap(b[tric], h)
        kernel = _geometry.triclinic_pairs if pairs else _geometry.triclinic_arrays
        got = kernel(np.ascontiguousarray(aw), np.ascontiguousarray(bw), h, safe_radius2(h))
        if tric.all():
            return got   # every frame triclinic (a GROMACS dodecahedron): no second (F, N, M) copy
        out[tric] = got
    return out


def quad_dihedrals(x: np.ndarray, quad: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(F, M) dihedral angles in radians of the atom quadruples ``quad`` (4, M) (indices into ``x``'s atoms,
    (F, A, 3)), each bond minimum-imaged in an orthorhombic box of edges ``lengths`` (F, 3; zeros: no box).
    Compiled: one pass over the frames, float64 whatever ``x``'s precision."""
    return _geometry.dihedrals(_native(x), np.ascontiguousarray(quad, np.int64),
                               np.ascontiguousarray(lengths, np.float64).reshape(-1, 3))


def quad_dihedral_sincos(x: np.ndarray, quad: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(F, M, 2) sine and cosine of :func:`quad_dihedrals`' angles (the same arguments), without the angles:
    each from the two arguments of its ``atan2``, equal to ``np.sin``/``np.cos`` of its angles to rounding.
    Compiled, one pass over the frames."""
    return _geometry.dihedral_sincos(_native(x), np.ascontiguousarray(quad, np.int64),
                                     np.ascontiguousarray(lengths, np.float64).reshape(-1, 3))


def pair_distances(a: np.ndarray, b: np.ndarray, dims: np.ndarray | None = None) -> np.ndarray:
    """(F, N) distances between atom i of ``a`` and atom i of ``b`` (both (F, N, 3)), minimum image if boxed."""
    return _distances(a, b, dims, pairs=True)


def indexed_pair_distances(x: np.ndarray, pa: np.ndarray, pb: np.ndarray,
                           dims: np.ndarray | None = None) -> np.ndarray:
    """(F, P) distances between atoms ``pa[p]`` and ``pb[p]`` of ``x`` (F, A, 3): ``pair_distances(x[:, pa],
    x[:, pb], dims)``, the same bits; compiled without the two gathers unless a frame's box is triclinic."""
    x = _native(x)
    pa, pb = np.ascontiguousarray(pa, np.int64), np.ascontiguousarray(pb, np.int64)
    lengths = _orthorhombic_lengths(dims, x.shape[0])
    if lengths is None:
        return pair_distances(x[:, pa], x[:, pb], dims)
    return _geometry.indexed_pairs(x, pa, pb, lengths)


def _orthorhombic_lengths(dims: np.ndarray | None, n_frames: int) -> np.ndarray | None:
    """(F, 3) each frame's box edges (zeros: none); None where a frame's box is triclinic."""
    if dims is None:
        return np.zeros((n_frames, 3))
    d = np.asarray(dims, np.float64).reshape(-1, 6)
    boxed = triclinic_vectors(d)[:, 0, 0] > 0
    if not (~boxed | (d[:, 3:] == 90.0).all(axis=1)).all():
        return None
    return np.ascontiguousarray(np.where(boxed[:, None], d[:, :3], 0.0))


def distance_arrays(a: np.ndarray, b: np.ndarray, dims: np.ndarray | None = None) -> np.ndarray:
    """(F, N, M) all distances between ``a`` (F, N, 3) and ``b`` (F, M, 3), minimum image if boxed (orthorhombic
    boxes and none: :func:`indexed_pair_distances` over every pair, the same bits without NumPy's temporaries)."""
    a, b = _native(a), _native(b)
    shaped = a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0] and a.shape[2] == 3 and b.shape[2] == 3
    lengths = _orthorhombic_lengths(dims, a.shape[0]) if shaped else None
    if lengths is None:
        return _distances(a, b, dims, pairs=False)
    n, m = a.shape[1], b.shape[1]
    pa, pb = np.repeat(np.arange(n), m), n + np.tile(np.arange(m), n)
    return _geometry.indexed_pairs(np.concatenate([a, b], axis=1), pa, pb, lengths).reshape(a.shape[0], n, m)


def centre_of_mass(x: np.ndarray, masses: np.ndarray | None = None) -> np.ndarray:
    """(F, 3) weighted centres of (F, N, 3) coordinates (uniform without masses)."""
    w = np.full(x.shape[1], 1.0 / x.shape[1]) if masses is None else np.asarray(masses, np.float64) / np.sum(masses)
    return np.einsum("n,fnk->fk", w, x, dtype=np.float64)


def radius_of_gyration(x: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """(F,) mass-weighted radius of gyration, as ``AtomGroup.radius_of_gyration()`` (no wrapping); compiled
    over the block as read (NumPy's (F, N, 3) float64 temporaries cost many times the kernel)."""
    return _geometry.radius_of_gyration(_native(x), np.ascontiguousarray(masses, dtype=np.float64))


def apply_fit(x: np.ndarray, rotation: np.ndarray, mobile_com: np.ndarray, ref_com: np.ndarray) -> np.ndarray:
    """Move (F, N, 3) coordinates by per-frame fits: ``(x - mobile_com) @ R + ref_com``, float64."""
    xc = np.asarray(x, np.float64) - mobile_com[:, None, :]
    return np.einsum("fni,fij->fnj", xc, rotation) + ref_com
