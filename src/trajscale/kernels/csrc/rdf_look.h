/* The RDF search's float32 first look at a row of candidates (see _pairs.pyx's _sorted_frame): the
 * squared distances of one atom of the first selection to n atoms of the second, stored as rows x, y, z,
 * with the row's box image fixed (triclinic) or the minimum image of each axis (orthorhombic), and the
 * list of the candidates the look cannot place between the bounds near and far (d2 <= near or d2 >= far:
 * perhaps within the cut-off, or perhaps past the safe radius), made without a branch per candidate (about
 * one in ten passes, and a branch on each was mispredicted that often).
 *
 * The vectors hold 4 (SSE2), 8 (AVX2) or 16 (AVX-512) atoms, chosen at run time (rdf_cells.h's level),
 * and read and write whole vectors: up to one vector past n, which the caller's arrays hold.  Every step
 * is one IEEE float32 operation in the order of the scalar code (no FMA: -ffp-contract=off, no "fma"
 * target), so the values are the same bits at every width. */
#ifndef TRAJSCALE_RDF_LOOK_H
#define TRAJSCALE_RDF_LOOK_H
#include <stdint.h>
#include <string.h>
#include "rdf_cells.h"
#if defined(__GNUC__) && (defined(__x86_64__) || defined(_M_X64))
#include <immintrin.h>
#endif

/* Floats past n that a look may read and write. */
#define TS_LOOK_PAD 16

#if defined(__GNUC__)
typedef float ts_lf4 __attribute__((vector_size(16)));
typedef int32_t ts_li4 __attribute__((vector_size(16)));
typedef float ts_lf8 __attribute__((vector_size(32)));
typedef int32_t ts_li8 __attribute__((vector_size(32)));
typedef float ts_lf16 __attribute__((vector_size(64)));
typedef int32_t ts_li16 __attribute__((vector_size(64)));

/* Lanes of r (q + lane < n) with r <= near or r >= far appended to cand at c: lane by lane, or with
 * AVX-512's compress into a register, stored whole (up to 16 past c: the compressing store to memory
 * is microcoded on AMD Zen 4, a hundred cycles and more). */
#define TS_COMPACT_LANES(W)                                                                        \
    do {                                                                                           \
        tsI m_ = (r <= near) | (r >= far);                                                         \
        for (int l_ = 0; l_ < (W); l_++) {                                                         \
            cand[c] = (int32_t)(q + l_);                                                           \
            c += (m_[l_] != 0) & (q + l_ < n);                                                     \
        }                                                                                          \
    } while (0)
#define TS_COMPACT_AVX512(W)                                                                       \
    do {                                                                                           \
        __m512 r_ = (__m512)r;                                                                     \
        (void)sizeof(tsI);                                                                         \
        __mmask16 k_ = _mm512_cmp_ps_mask(r_, _mm512_set1_ps(near), _CMP_LE_OQ)                   \
                       | _mm512_cmp_ps_mask(r_, _mm512_set1_ps(far), _CMP_GE_OQ);                  \
        if (n - q < 16)                                                                            \
            k_ &= (__mmask16)((1u << (n - q)) - 1u);                                               \
        __m512i i_ = _mm512_add_epi32(_mm512_set1_epi32((int32_t)q),                               \
                                      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,  \
                                                        13, 14, 15));                              \
        _mm512_storeu_si512((void *)(cand + c), _mm512_maskz_compress_epi32(k_, i_));              \
        c += __builtin_popcount((unsigned)k_);                                                     \
    } while (0)

#define TS_LOOK_LOOPS(SUFFIX, ATTR, W, COMPACT)                                                    \
ATTR static int64_t ts_look_tric_##SUFFIX(float ax, float ay, float az, float f0, float f1, float f2, \
                                          const float *bx, const float *by, const float *bz,      \
                                          int64_t n, float near, float far, float *d2,             \
                                          int32_t *cand) {                                         \
    typedef ts_lf##W tsF;                                                                          \
    typedef ts_li##W tsI;                                                                          \
    int64_t c = 0;                                                                                 \
    for (int64_t q = 0; q < n; q += W) {                                                           \
        tsF x, y, z;                                                                               \
        memcpy(&x, bx + q, sizeof x);                                                              \
        memcpy(&y, by + q, sizeof y);                                                              \
        memcpy(&z, bz + q, sizeof z);                                                              \
        tsF gx = (ax - x) + f0, gy = (ay - y) + f1, gz = (az - z) + f2;                            \
        tsF r = gx * gx + gy * gy + gz * gz;                                                       \
        memcpy(d2 + q, &r, sizeof r);                                                              \
        COMPACT(W);                                                                                \
    }                                                                                              \
    return c;                                                                                      \
}                                                                                                  \
ATTR static int64_t ts_look_ortho_##SUFFIX(float ax, float ay, float az, const float *half,       \
                                           const float *len, const float *bx, const float *by,     \
                                           const float *bz, int64_t n, float near, float far,      \
                                           float *d2, int32_t *cand) {                             \
    typedef ts_lf##W tsF;                                                                          \
    typedef ts_li##W tsI;                                                                          \
    int64_t c = 0;                                                                                 \
    const float h0 = half[0], h1 = half[1], h2 = half[2], l0 = len[0], l1 = len[1], l2 = len[2];   \
    for (int64_t q = 0; q < n; q += W) {                                                           \
        tsF x, y, z;                                                                               \
        memcpy(&x, bx + q, sizeof x);                                                              \
        memcpy(&y, by + q, sizeof y);                                                              \
        memcpy(&z, bz + q, sizeof z);                                                              \
        tsF gx = ax - x, gy = ay - y, gz = az - z;                                                 \
        gx = TS_LOOK_IMAGE(gx, h0, l0);                                                            \
        gy = TS_LOOK_IMAGE(gy, h1, l1);                                                            \
        gz = TS_LOOK_IMAGE(gz, h2, l2);                                                            \
        tsF r = gx * gx + gy * gy + gz * gz;                                                       \
        memcpy(d2 + q, &r, sizeof r);                                                              \
        COMPACT(W);                                                                                \
    }                                                                                              \
    return c;                                                                                      \
}

/* _minimum_image_ortho_lazy in float32: g - l where g > h, g + l where g <= -h, else g */
#define TS_LOOK_IMAGE(g, h, l)                                                                     \
    ({ tsI up_ = (g) > (h), down_ = (g) <= -(h);                                                   \
       tsF lo_ = (g) - (l), hi_ = (g) + (l);                                                       \
       (tsF)(((tsI)lo_ & up_) | ((tsI)hi_ & down_) | ((tsI)(g) & ~(up_ | down_))); })

TS_LOOK_LOOPS(base, , 4, TS_COMPACT_LANES)
#if defined(__x86_64__) || defined(_M_X64)
#define TS_LOOK_X86 1
TS_LOOK_LOOPS(avx2, __attribute__((target("avx2"))), 8, TS_COMPACT_LANES)
TS_LOOK_LOOPS(avx512, __attribute__((target("avx512f,avx512dq,avx512vl,prefer-vector-width=512"))), 16,
              TS_COMPACT_AVX512)
#endif
#endif   /* __GNUC__ */

/* The row's first look: d2[q] for q < n (and maybe a few past n, up to TS_LOOK_PAD), and the q with
 * d2[q] <= near or d2[q] >= far, in order, into cand (n + TS_LOOK_PAD long: up to TS_LOOK_PAD past the
 * last are written); returns how many. */
static inline int64_t ts_look_tric(int level, float ax, float ay, float az, float f0, float f1, float f2,
                                   const float *bx, const float *by, const float *bz, int64_t n, float near,
                                   float far, float *d2, int32_t *cand) {
#if defined(__GNUC__)
#ifdef TS_LOOK_X86
    if (level == 3) return ts_look_tric_avx512(ax, ay, az, f0, f1, f2, bx, by, bz, n, near, far, d2, cand);
    if (level == 2) return ts_look_tric_avx2(ax, ay, az, f0, f1, f2, bx, by, bz, n, near, far, d2, cand);
#endif
    (void)level;
    return ts_look_tric_base(ax, ay, az, f0, f1, f2, bx, by, bz, n, near, far, d2, cand);
#else
    int64_t c = 0;
    (void)level;
    for (int64_t q = 0; q < n; q++) {
        float gx = (ax - bx[q]) + f0, gy = (ay - by[q]) + f1, gz = (az - bz[q]) + f2;
        d2[q] = gx * gx + gy * gy + gz * gz;
        if (d2[q] <= near || d2[q] >= far)
            cand[c++] = (int32_t)q;
    }
    return c;
#endif
}

static inline int64_t ts_look_ortho(int level, float ax, float ay, float az, const float *half,
                                    const float *len, const float *bx, const float *by, const float *bz,
                                    int64_t n, float near, float far, float *d2, int32_t *cand) {
#if defined(__GNUC__)
#ifdef TS_LOOK_X86
    if (level == 3) return ts_look_ortho_avx512(ax, ay, az, half, len, bx, by, bz, n, near, far, d2, cand);
    if (level == 2) return ts_look_ortho_avx2(ax, ay, az, half, len, bx, by, bz, n, near, far, d2, cand);
#endif
    (void)level;
    return ts_look_ortho_base(ax, ay, az, half, len, bx, by, bz, n, near, far, d2, cand);
#else
    int64_t c = 0;
    (void)level;
    for (int64_t q = 0; q < n; q++) {
        float g[3] = {ax - bx[q], ay - by[q], az - bz[q]};
        for (int k = 0; k < 3; k++)
            g[k] = g[k] > half[k] ? g[k] - len[k] : (g[k] <= -half[k] ? g[k] + len[k] : g[k]);
        d2[q] = g[0] * g[0] + g[1] * g[1] + g[2] * g[2];
        if (d2[q] <= near || d2[q] >= far)
            cand[c++] = (int32_t)q;
    }
    return c;
#endif
}

#endif
