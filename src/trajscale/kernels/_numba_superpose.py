"""numba loops behind :mod:`trajscale.kernels.superpose` (imported only when numba is installed).

Compiled eagerly for float32 coordinates with ``cache=True``: the first import
compiles and stores machine code beside this file; later imports (worker
processes included) load it in milliseconds.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_F32_3D = "float32[:, :, ::1]"


@njit(f"Tuple((float64[:, ::1], float64[:, :, ::1], float64[::1]))({_F32_3D}, float64[::1], float64[:, ::1])",
      cache=True, nogil=True)
def covariance(x, w, yc):
    """Weighted centres, covariances with the centred reference, and E0 of every frame."""
    n_frames, n_atoms = x.shape[0], x.shape[1]
    com = np.zeros((n_frames, 3))
    h = np.zeros((n_frames, 3, 3))
    e0 = np.zeros(n_frames)
    for f in range(n_frames):
        # Scalar accumulators stay in registers (array += in the loop went through memory, 4x slower);
        # the order of the sums is unchanged, so the results are the same bits.
        c0 = c1 = c2 = 0.0
        for a in range(n_atoms):
            c0 += w[a] * x[f, a, 0]
            c1 += w[a] * x[f, a, 1]
            c2 += w[a] * x[f, a, 2]
        com[f, 0], com[f, 1], com[f, 2] = c0, c1, c2
        h00 = h01 = h02 = h10 = h11 = h12 = h20 = h21 = h22 = e = 0.0
        for a in range(n_atoms):
            x0 = x[f, a, 0] - c0
            x1 = x[f, a, 1] - c1
            x2 = x[f, a, 2] - c2
            wa = w[a]
            e += wa * x0 * x0
            h00 += wa * x0 * yc[a, 0]
            h01 += wa * x0 * yc[a, 1]
            h02 += wa * x0 * yc[a, 2]
            e += wa * x1 * x1
            h10 += wa * x1 * yc[a, 0]
            h11 += wa * x1 * yc[a, 1]
            h12 += wa * x1 * yc[a, 2]
            e += wa * x2 * x2
            h20 += wa * x2 * yc[a, 0]
            h21 += wa * x2 * yc[a, 1]
            h22 += wa * x2 * yc[a, 2]
        e0[f] = e
        h[f, 0, 0], h[f, 0, 1], h[f, 0, 2] = h00, h01, h02
        h[f, 1, 0], h[f, 1, 1], h[f, 1, 2] = h10, h11, h12
        h[f, 2, 0], h[f, 2, 1], h[f, 2, 2] = h20, h21, h22
    return com, h, e0


@njit(f"float64[::1]({_F32_3D}, float64[:, :, ::1], float64[:, ::1], float64[::1], float64[:, ::1], float64[::1])",
      cache=True, nogil=True)
def moved_rmsd(x, rot, x_com, y_com, ref, w):
    """Weighted RMSD to ``ref`` of atoms moved by each frame's fit: (x - x_com) @ rot + y_com.

    ``sqrt(sum_a w_a |d_a|^2 / sum_a w_a)``; all-ones weights give the plain RMSD.
    """
    n_frames, n_atoms = x.shape[0], x.shape[1]
    w_sum = 0.0
    for a in range(n_atoms):
        w_sum += w[a]
    out = np.zeros(n_frames)
    for f in range(n_frames):
        acc = 0.0
        for a in range(n_atoms):
            for j in range(3):
                m = y_com[j]
                for i in range(3):
                    m += (x[f, a, i] - x_com[f, i]) * rot[f, i, j]
                d = m - ref[a, j]
                acc += w[a] * d * d
        out[f] = np.sqrt(acc / w_sum)
    return out


@njit(cache=True, nogil=True, inline="always")
def _qcp_msd(e0, sxx, sxy, sxz, syx, syy, syz, szx, szy, szz):
    """Mean square deviation from QCP's largest eigenvalue (weights summing to 1)."""
    sxx2, syy2, szz2 = sxx * sxx, syy * syy, szz * szz
    sxy2, syz2, sxz2 = sxy * sxy, syz * syz, sxz * sxz
    syx2, szy2, szx2 = syx * syx, szy * szy, szx * szx
    sxzpszx, syzpszy, sxypsyx = sxz + szx, syz + szy, sxy + syx
    syzmszy, sxzmszx, sxymsyx = syz - szy, sxz - szx, sxy - syx
    sxxpsyy, sxxmsyy = sxx + syy, sxx - syy
    sxy2sxz2syx2szx2 = sxy2 + sxz2 - syx2 - szx2
    c2 = -2.0 * (sxx2 + syy2 + szz2 + sxy2 + syx2 + sxz2 + szx2 + syz2 + szy2)
    c1 = 8.0 * (sxx * syz * szy + syy * szx * sxz + szz * sxy * syx
                - sxx * syy * szz - syz * szx * sxy - szy * syx * sxz)
    syzszymsyyszz2 = 2.0 * (syz * szy - syy * szz)
    sxx2syy2szz2syz2szy2 = syy2 + szz2 - sxx2 + syz2 + szy2
    c0 = (sxy2sxz2syx2szx2 * sxy2sxz2syx2szx2
          + (sxx2syy2szz2syz2szy2 + syzszymsyyszz2) * (sxx2syy2szz2syz2szy2 - syzszymsyyszz2)
          + (-sxzpszx * syzmszy + sxymsyx * (sxxmsyy - szz)) * (-sxzmszx * syzpszy + sxymsyx * (sxxmsyy + szz))
          + (-sxzpszx * syzpszy - sxypsyx * (sxxpsyy - szz)) * (-sxzmszx * syzmszy - sxypsyx * (sxxpsyy + szz))
          + (sxypsyx * syzpszy + sxzpszx * (sxxmsyy + szz)) * (-sxymsyx * syzmszy + sxzpszx * (sxxpsyy + szz))
          + (sxypsyx * syzmszy + sxzmszx * (sxxmsyy - szz)) * (-sxymsyx * syzpszy + sxzmszx * (sxxpsyy - szz)))
    # Newton from E0 (an upper bound of the largest root); a relative step of 1e-12
    # leaves an error of ~1e-24 (quadratic convergence), below float64 rounding.
    lam = e0
    for _ in range(60):
        lam2 = lam * lam
        b = (lam2 + c2) * lam
        a = b + c1
        denom = 2.0 * lam2 * lam + b + a
        if denom == 0.0:
            break
        delta = (a * lam + c0) / denom
        lam -= delta
        if abs(delta) <= 1e-12 * abs(lam):
            break
    return max(2.0 * (e0 - lam), 0.0)


@njit(f"float64[::1]({_F32_3D}, float64[::1], float64[:, ::1], float64[::1], float64, boolean)",
      cache=True, nogil=True)
def qcp_rmsd(x, w, yc, y_wsum, g_ref, uniform):
    """RMSD of every frame after optimal superposition: one pass over the atoms, then QCP.

    ``yc`` is the centred reference, ``y_wsum`` its weighted sum (zero up to
    rounding) and ``g_ref`` its weighted norm; weights sum to 1 (``uniform``:
    all ``1/N``, skipped in the loop). Per frame, one pass accumulates the
    centre, the norm and the covariance with the reference in float64 (the
    mobile frame's centring is applied to the sums afterwards: ``H = Σ w x yc^T
    - c ⊗ Σ w yc``, ``G = Σ w |x|² - |c|²``); the largest eigenvalue of the QCP
    key matrix is then found by Newton's method on its characteristic quartic
    (Theobald 2005; Liu, Agrafiotis & Theobald 2010), as MDAnalysis's qcprot.
    A frame with a non-finite coordinate gets NaN.
    """
    n_frames, n_atoms = x.shape[0], x.shape[1]
    out = np.empty(n_frames)
    scale = 1.0 / n_atoms
    for f in range(n_frames):
        c0 = c1 = c2 = q = 0.0
        h00 = h01 = h02 = h10 = h11 = h12 = h20 = h21 = h22 = 0.0
        if uniform:
            for a in range(n_atoms):
                x0 = np.float64(x[f, a, 0])
                x1 = np.float64(x[f, a, 1])
                x2 = np.float64(x[f, a, 2])
                y0, y1, y2 = yc[a, 0], yc[a, 1], yc[a, 2]
                c0 += x0
                c1 += x1
                c2 += x2
                q += x0 * x0 + x1 * x1 + x2 * x2
                h00 += x0 * y0
                h01 += x0 * y1
                h02 += x0 * y2
                h10 += x1 * y0
                h11 += x1 * y1
                h12 += x1 * y2
                h20 += x2 * y0
                h21 += x2 * y1
                h22 += x2 * y2
            c0 *= scale
            c1 *= scale
            c2 *= scale
            q *= scale
            h00 *= scale
            h01 *= scale
            h02 *= scale
            h10 *= scale
            h11 *= scale
            h12 *= scale
            h20 *= scale
            h21 *= scale
            h22 *= scale
        else:
            for a in range(n_atoms):
                wa = w[a]
                x0 = np.float64(x[f, a, 0])
                x1 = np.float64(x[f, a, 1])
                x2 = np.float64(x[f, a, 2])
                y0, y1, y2 = yc[a, 0], yc[a, 1], yc[a, 2]
                w0, w1, w2 = wa * x0, wa * x1, wa * x2
                c0 += w0
                c1 += w1
                c2 += w2
                q += w0 * x0 + w1 * x1 + w2 * x2
                h00 += w0 * y0
                h01 += w0 * y1
                h02 += w0 * y2
                h10 += w1 * y0
                h11 += w1 * y1
                h12 += w1 * y2
                h20 += w2 * y0
                h21 += w2 * y1
                h22 += w2 * y2
        # Centre the mobile frame in the sums.
        s0, s1, s2 = y_wsum[0], y_wsum[1], y_wsum[2]
        sxx, sxy, sxz = h00 - c0 * s0, h01 - c0 * s1, h02 - c0 * s2
        syx, syy, syz = h10 - c1 * s0, h11 - c1 * s1, h12 - c1 * s2
        szx, szy, szz = h20 - c2 * s0, h21 - c2 * s1, h22 - c2 * s2
        g_mob = q - (c0 * c0 + c1 * c1 + c2 * c2)
        e0 = 0.5 * (g_mob + g_ref)
        if not np.isfinite(e0 + sxx + sxy + sxz + syx + syy + syz + szx + szy + szz):
            out[f] = np.nan
            continue
        out[f] = _qcp_msd(e0, sxx, sxy, sxz, syx, syy, syz, szx, szy, szz) ** 0.5
    return out

