/* One pass over a frame's atoms for QCP: the 13 weighted sums
 *   c_i = sum_a w_a x_ai,  q = sum_a w_a |x_a|^2,  h_ij = sum_a w_a x_ai y_aj
 * of float32 coordinates x (AoS, n x 3) against a float64 reference y, in float64.
 *
 * The reference comes in groups of 4 atoms, y[12 g + 4 j + l] = y_j of atom 4 g + l (zero
 * past n): one stream that the vector loops load 4 atoms at a time (three separate x, y and
 * z rows cost 20 % more at 47,681 atoms, memory traffic).
 *
 * Determinism: atom a is summed into lane a % 4, each lane in atom order, and the lanes are
 * combined as (l0 + l1) + (l2 + l3).  The scalar, SSE2 and AVX versions do the same IEEE
 * operations in the same order on each lane (no FMA: -ffp-contract=off and no "fma" target),
 * so they give the same bits, and a frame's sums depend only on its own coordinates.
 *
 * w == NULL: all weights 1 (the caller scales by 1/n).
 */
#ifndef TRAJSCALE_QCP_SUMS_H
#define TRAJSCALE_QCP_SUMS_H

#include <math.h>
#include <stddef.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define TS_X86 1
#endif

#define TS_NSUMS 13  /* c0 c1 c2 q h00 h01 h02 h10 h11 h12 h20 h21 h22 */

/* One atom added to lane l (the scalar loop, and the n % 4 last atoms of the vector loops). */
static inline void ts_lane_step(double acc[TS_NSUMS][4], int l, const float *xa, const double *yg,
                                const double *w, ptrdiff_t a)
{
    double x0 = (double)xa[0], x1 = (double)xa[1], x2 = (double)xa[2];
    double y0 = yg[l], y1 = yg[4 + l], y2 = yg[8 + l];
    if (w) {
        double wa = w[a];
        x0 = wa * x0; x1 = wa * x1; x2 = wa * x2;   /* wx */
        acc[0][l] += x0; acc[1][l] += x1; acc[2][l] += x2;
        acc[3][l] += (x0 * (double)xa[0] + x1 * (double)xa[1]) + x2 * (double)xa[2];
    } else {
        acc[0][l] += x0; acc[1][l] += x1; acc[2][l] += x2;
        acc[3][l] += (x0 * x0 + x1 * x1) + x2 * x2;
    }
    acc[4][l] += x0 * y0; acc[5][l] += x0 * y1; acc[6][l] += x0 * y2;
    acc[7][l] += x1 * y0; acc[8][l] += x1 * y1; acc[9][l] += x1 * y2;
    acc[10][l] += x2 * y0; acc[11][l] += x2 * y1; acc[12][l] += x2 * y2;
}

/* Coordinates are read once, in order, and the hardware prefetcher does not keep up with the
 * stream (on the 2-core test VM the pass ran at half speed): each step asks for the floats
 * 4 KB ahead.  A prefetch never faults (past the end of a frame it fetches the next). */
#define TS_AHEAD 1024
#if defined(__GNUC__)
#define TS_PREFETCH(p) __builtin_prefetch((const void *)(p), 0, 3)
#else
#define TS_PREFETCH(p) ((void)0)
#endif

/* Lanes of atoms [0, n4) (n4 a multiple of 4) added to acc (likewise the vector versions). */
static void ts_lanes_scalar(const float *x, const double *y, const double *w, ptrdiff_t n4, double acc[TS_NSUMS][4])
{
    for (ptrdiff_t a = 0; a < n4; a += 4) {
        TS_PREFETCH(x + 3 * a + TS_AHEAD);
        for (int l = 0; l < 4; l++)
            ts_lane_step(acc, l, x + 3 * (a + l), y + 3 * a, w, a + l);
    }
}

#ifdef TS_X86
/* 4 atoms of AoS float32 (12 floats) to X, Y, Z (4 floats each). */
#define TS_DEINTERLEAVE(p, X, Y, Z) do { \
        __m128 A_ = _mm_loadu_ps(p), B_ = _mm_loadu_ps((p) + 4), C_ = _mm_loadu_ps((p) + 8); \
        X = _mm_shuffle_ps(A_, _mm_shuffle_ps(B_, C_, _MM_SHUFFLE(1, 0, 3, 2)), _MM_SHUFFLE(3, 0, 3, 0)); \
        Y = _mm_shuffle_ps(_mm_shuffle_ps(A_, B_, _MM_SHUFFLE(0, 0, 1, 1)), \
                           _mm_shuffle_ps(B_, C_, _MM_SHUFFLE(2, 2, 3, 3)), _MM_SHUFFLE(3, 0, 3, 0)); \
        Z = _mm_shuffle_ps(_mm_shuffle_ps(A_, B_, _MM_SHUFFLE(1, 1, 2, 2)), \
                           _mm_shuffle_ps(C_, C_, _MM_SHUFFLE(3, 3, 0, 0)), _MM_SHUFFLE(3, 0, 3, 0)); \
    } while (0)

/* SSE2 (baseline of x86-64): lanes 0-1 in the "lo" registers (hh = 0), lanes 2-3 in "hi". */
static void ts_lanes_sse2(const float *x, const double *y, const double *w, ptrdiff_t n4, double acc[TS_NSUMS][4])
{
    __m128d s[TS_NSUMS][2];
    for (int k = 0; k < TS_NSUMS; k++) {
        s[k][0] = _mm_loadu_pd(&acc[k][0]);
        s[k][1] = _mm_loadu_pd(&acc[k][2]);
    }
    for (ptrdiff_t a = 0; a < n4; a += 4) {
        __m128 X, Y, Z;
        TS_PREFETCH(x + 3 * a + TS_AHEAD);
        TS_DEINTERLEAVE(x + 3 * a, X, Y, Z);
        const double *yg = y + 3 * a;
        for (int hh = 0; hh < 2; hh++) {
            __m128d x0, x1, x2;
            if (hh == 0) {
                x0 = _mm_cvtps_pd(X); x1 = _mm_cvtps_pd(Y); x2 = _mm_cvtps_pd(Z);
            } else {
                x0 = _mm_cvtps_pd(_mm_movehl_ps(X, X)); x1 = _mm_cvtps_pd(_mm_movehl_ps(Y, Y));
                x2 = _mm_cvtps_pd(_mm_movehl_ps(Z, Z));
            }
            __m128d r0 = _mm_loadu_pd(yg + 2 * hh), r1 = _mm_loadu_pd(yg + 4 + 2 * hh),
                    r2 = _mm_loadu_pd(yg + 8 + 2 * hh);
            __m128d q;
            if (w) {
                __m128d wa = _mm_loadu_pd(w + a + 2 * hh);
                __m128d v0 = _mm_mul_pd(wa, x0), v1 = _mm_mul_pd(wa, x1), v2 = _mm_mul_pd(wa, x2);
                q = _mm_add_pd(_mm_add_pd(_mm_mul_pd(v0, x0), _mm_mul_pd(v1, x1)), _mm_mul_pd(v2, x2));
                x0 = v0; x1 = v1; x2 = v2;
            } else {
                q = _mm_add_pd(_mm_add_pd(_mm_mul_pd(x0, x0), _mm_mul_pd(x1, x1)), _mm_mul_pd(x2, x2));
            }
            s[0][hh] = _mm_add_pd(s[0][hh], x0);
            s[1][hh] = _mm_add_pd(s[1][hh], x1);
            s[2][hh] = _mm_add_pd(s[2][hh], x2);
            s[3][hh] = _mm_add_pd(s[3][hh], q);
            s[4][hh] = _mm_add_pd(s[4][hh], _mm_mul_pd(x0, r0));
            s[5][hh] = _mm_add_pd(s[5][hh], _mm_mul_pd(x0, r1));
            s[6][hh] = _mm_add_pd(s[6][hh], _mm_mul_pd(x0, r2));
            s[7][hh] = _mm_add_pd(s[7][hh], _mm_mul_pd(x1, r0));
            s[8][hh] = _mm_add_pd(s[8][hh], _mm_mul_pd(x1, r1));
            s[9][hh] = _mm_add_pd(s[9][hh], _mm_mul_pd(x1, r2));
            s[10][hh] = _mm_add_pd(s[10][hh], _mm_mul_pd(x2, r0));
            s[11][hh] = _mm_add_pd(s[11][hh], _mm_mul_pd(x2, r1));
            s[12][hh] = _mm_add_pd(s[12][hh], _mm_mul_pd(x2, r2));
        }
    }
    for (int k = 0; k < TS_NSUMS; k++) {
        _mm_storeu_pd(&acc[k][0], s[k][0]);
        _mm_storeu_pd(&acc[k][2], s[k][1]);
    }
}

#if defined(__GNUC__)
#define TS_HAVE_AVX 1
/* AVX: the 4 lanes in one register; compiled for AVX here only, chosen at run time. */
__attribute__((target("avx")))
static void ts_lanes_avx(const float *x, const double *y, const double *w, ptrdiff_t n4, double acc[TS_NSUMS][4])
{
    __m256d s[TS_NSUMS];
    for (int k = 0; k < TS_NSUMS; k++) s[k] = _mm256_loadu_pd(&acc[k][0]);
    for (ptrdiff_t a = 0; a < n4; a += 4) {
        __m128 X, Y, Z;
        TS_PREFETCH(x + 3 * a + TS_AHEAD);
        TS_DEINTERLEAVE(x + 3 * a, X, Y, Z);
        __m256d x0 = _mm256_cvtps_pd(X), x1 = _mm256_cvtps_pd(Y), x2 = _mm256_cvtps_pd(Z), q;
        if (w) {
            __m256d wa = _mm256_loadu_pd(w + a);
            __m256d v0 = _mm256_mul_pd(wa, x0), v1 = _mm256_mul_pd(wa, x1), v2 = _mm256_mul_pd(wa, x2);
            q = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(v0, x0), _mm256_mul_pd(v1, x1)), _mm256_mul_pd(v2, x2));
            x0 = v0; x1 = v1; x2 = v2;
        } else {
            q = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(x0, x0), _mm256_mul_pd(x1, x1)), _mm256_mul_pd(x2, x2));
        }
        const double *yg = y + 3 * a;
        __m256d r0 = _mm256_loadu_pd(yg), r1 = _mm256_loadu_pd(yg + 4), r2 = _mm256_loadu_pd(yg + 8);
        s[0] = _mm256_add_pd(s[0], x0);
        s[1] = _mm256_add_pd(s[1], x1);
        s[2] = _mm256_add_pd(s[2], x2);
        s[3] = _mm256_add_pd(s[3], q);
        s[4] = _mm256_add_pd(s[4], _mm256_mul_pd(x0, r0));
        s[5] = _mm256_add_pd(s[5], _mm256_mul_pd(x0, r1));
        s[6] = _mm256_add_pd(s[6], _mm256_mul_pd(x0, r2));
        s[7] = _mm256_add_pd(s[7], _mm256_mul_pd(x1, r0));
        s[8] = _mm256_add_pd(s[8], _mm256_mul_pd(x1, r1));
        s[9] = _mm256_add_pd(s[9], _mm256_mul_pd(x1, r2));
        s[10] = _mm256_add_pd(s[10], _mm256_mul_pd(x2, r0));
        s[11] = _mm256_add_pd(s[11], _mm256_mul_pd(x2, r1));
        s[12] = _mm256_add_pd(s[12], _mm256_mul_pd(x2, r2));
    }
    for (int k = 0; k < TS_NSUMS; k++) _mm256_storeu_pd(&acc[k][0], s[k]);
}
#endif
#endif

typedef void (*ts_lanes_fn)(const float *, const double *, const double *, ptrdiff_t, double (*)[4]);

/* 0: scalar, 1: SSE2, 2: AVX; the best this CPU runs when asked for more. */
static int ts_simd_level(int wanted)
{
#ifdef TS_X86
#ifdef TS_HAVE_AVX
    __builtin_cpu_init();   /* idempotent; needed where no constructor has run it yet */
    if (wanted >= 2 && __builtin_cpu_supports("avx")) return 2;
#endif
    if (wanted >= 1) return 1;
#endif
    return 0;
}

/* The 13 sums (out: nf x 13) of nf frames at base, base + fstride, ... (bytes), each (n, 3) C-contiguous. */
static void ts_qcp_sums_frames(int level, const char *base, ptrdiff_t fstride, ptrdiff_t nf, const double *y,
                               const double *w, ptrdiff_t n, double *out)
{
    ts_lanes_fn lanes = ts_lanes_scalar;
#ifdef TS_X86
    if (level == 1) lanes = ts_lanes_sse2;
#ifdef TS_HAVE_AVX
    if (level == 2) lanes = ts_lanes_avx;
#endif
#endif
    ptrdiff_t n4 = n - n % 4;
    for (ptrdiff_t f = 0; f < nf; f++) {
        const float *x = (const float *)(base + f * fstride);
        double acc[TS_NSUMS][4] = {{0.0}};
        lanes(x, y, w, n4, acc);
        for (ptrdiff_t a = n4; a < n; a++)
            ts_lane_step(acc, (int)(a - n4), x + 3 * a, y + 3 * n4, w, a);
        for (int k = 0; k < TS_NSUMS; k++)
            out[f * TS_NSUMS + k] = (acc[k][0] + acc[k][1]) + (acc[k][2] + acc[k][3]);
    }
}

/* Mean square deviation from QCP's largest eigenvalue (weights summing to 1): Newton's method on the
 * characteristic quartic from E0 (Theobald 2005; Liu, Agrafiotis & Theobald 2010), as MDAnalysis's qcprot. */
static double ts_qcp_msd(double e0, double sxx, double sxy, double sxz, double syx, double syy, double syz,
                         double szx, double szy, double szz)
{
    double sxx2 = sxx * sxx, syy2 = syy * syy, szz2 = szz * szz;
    double sxy2 = sxy * sxy, syz2 = syz * syz, sxz2 = sxz * sxz;
    double syx2 = syx * syx, szy2 = szy * szy, szx2 = szx * szx;
    double sxzpszx = sxz + szx, syzpszy = syz + szy, sxypsyx = sxy + syx;
    double syzmszy = syz - szy, sxzmszx = sxz - szx, sxymsyx = sxy - syx;
    double sxxpsyy = sxx + syy, sxxmsyy = sxx - syy;
    double sxy2sxz2syx2szx2 = sxy2 + sxz2 - syx2 - szx2;
    double c2 = -2.0 * (sxx2 + syy2 + szz2 + sxy2 + syx2 + sxz2 + szx2 + syz2 + szy2);
    double c1 = 8.0 * (sxx * syz * szy + syy * szx * sxz + szz * sxy * syx
                       - sxx * syy * szz - syz * szx * sxy - szy * syx * sxz);
    double syzszymsyyszz2 = 2.0 * (syz * szy - syy * szz);
    double sxx2syy2szz2syz2szy2 = syy2 + szz2 - sxx2 + syz2 + szy2;
    double c0 = sxy2sxz2syx2szx2 * sxy2sxz2syx2szx2
        + (sxx2syy2szz2syz2szy2 + syzszymsyyszz2) * (sxx2syy2szz2syz2szy2 - syzszymsyyszz2)
        + (-sxzpszx * syzmszy + sxymsyx * (sxxmsyy - szz)) * (-sxzmszx * syzpszy + sxymsyx * (sxxmsyy + szz))
        + (-sxzpszx * syzpszy - sxypsyx * (sxxpsyy - szz)) * (-sxzmszx * syzmszy - sxypsyx * (sxxpsyy + szz))
        + (sxypsyx * syzpszy + sxzpszx * (sxxmsyy + szz)) * (-sxymsyx * syzmszy + sxzpszx * (sxxpsyy + szz))
        + (sxypsyx * syzmszy + sxzmszx * (sxxmsyy - szz)) * (-sxymsyx * syzpszy + sxzmszx * (sxxpsyy - szz));
    /* From E0 (an upper bound of the largest root); a relative step of 1e-12 leaves an error
     * of ~1e-24 (quadratic convergence), below float64 rounding. */
    double lam = e0;
    for (int it = 0; it < 60; it++) {
        double lam2 = lam * lam;
        double b = (lam2 + c2) * lam;
        double a = b + c1;
        double denom = 2.0 * lam2 * lam + b + a;
        if (denom == 0.0) break;
        double delta = (a * lam + c0) / denom;
        lam -= delta;
        if (fabs(delta) <= 1e-12 * fabs(lam)) break;
    }
    double msd = 2.0 * (e0 - lam);
    return msd > 0.0 ? msd : 0.0;
}

#endif
