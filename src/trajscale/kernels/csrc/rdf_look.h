/* The RDF search's float32 first look at the rows of neighbour cells of one atom (see _pairs.pyx's
 * _sorted_frame), in one call: the squared distances of the atom of the first selection to the atoms of
 * the second in each row's segments (stored as rows x, y, z), with the row's box image fixed (triclinic)
 * or the minimum image of each axis (orthorhombic), and the list of the candidates the look cannot place
 * between the bounds near and far (d2 <= near or d2 >= far: perhaps within the cut-off, or perhaps past
 * the safe radius), made without a branch per candidate (about one in ten passes, and a branch on each
 * was mispredicted that often).
 *
 * The vectors hold 4 (SSE2), 8 (AVX2) or 16 (AVX-512) atoms, chosen at run time (rdf_cells.h's level),
 * and read whole vectors (up to one past a segment's end) and write whole vectors of candidates (up to one
 * past the last), which the caller's arrays hold.  Every step
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

/* Floats past a segment's end that a look may read, and entries past the last candidate it may write. */
#define TS_LOOK_PAD 16

/* A segment of a row of neighbour cells: the sorted second selection's atoms [p, pe), and the float32
 * box image f the row adds (triclinic; unused for an orthorhombic box). */
typedef struct {
    int64_t p, pe;
    float f[3];
} ts_seg_t;

#if defined(__GNUC__)
typedef float ts_lf4 __attribute__((vector_size(16)));
typedef int32_t ts_li4 __attribute__((vector_size(16)));
typedef float ts_lf8 __attribute__((vector_size(32)));
typedef int32_t ts_li8 __attribute__((vector_size(32)));
typedef float ts_lf16 __attribute__((vector_size(64)));
typedef int32_t ts_li16 __attribute__((vector_size(64)));

/* Lanes of r (q + lane < n) with r <= near or r >= far appended at c: their positions p + q + lane to
 * cand, the segment g to cseg and r to cd2; lane by lane, or with AVX-512's compress into a register,
 * stored whole (up to 16 past c: the compressing store to memory is microcoded on AMD Zen 4, a hundred
 * cycles and more). */
#define TS_COMPACT_LANES(W)                                                                        \
    do {                                                                                           \
        tsI m_ = (r <= near) | (r >= far);                                                         \
        for (int l_ = 0; l_ < (W); l_++) {                                                         \
            cand[c] = (int32_t)(p + q + l_);                                                       \
            cseg[c] = (int32_t)g;                                                                  \
            cd2[c] = r[l_];                                                                        \
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
        __m512i i_ = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(p + q)),                         \
                                      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,  \
                                                        13, 14, 15));                              \
        _mm512_storeu_si512((void *)(cand + c), _mm512_maskz_compress_epi32(k_, i_));              \
        _mm512_storeu_si512((void *)(cseg + c), _mm512_set1_epi32((int32_t)g));                    \
        _mm512_storeu_ps((void *)(cd2 + c), _mm512_maskz_compress_ps(k_, r_));                     \
        c += __builtin_popcount((unsigned)k_);                                                     \
    } while (0)

/* The segments' candidates, W at a time: the statements given set r, the squared distances of lanes q.. of segment g
 * (positions p + q..), from x, y, z. */
#define TS_LOOK_SEGMENTS(W, COMPACT, ...)                                                          \
    typedef ts_lf##W tsF;                                                                          \
    typedef ts_li##W tsI;                                                                          \
    int64_t c = 0;                                                                                 \
    for (int64_t g = 0; g < nseg; g++) {                                                           \
        const int64_t p = seg[g].p, n = seg[g].pe - seg[g].p;                                      \
        for (int64_t q = 0; q < n; q += W) {                                                       \
            tsF x, y, z, r;                                                                        \
            memcpy(&x, bx + p + q, sizeof x);                                                      \
            memcpy(&y, by + p + q, sizeof y);                                                      \
            memcpy(&z, bz + p + q, sizeof z);                                                      \
            __VA_ARGS__;                                                                           \
            COMPACT(W);                                                                            \
        }                                                                                          \
    }                                                                                              \
    return c;

#define TS_LOOK_LOOPS(SUFFIX, ATTR, W, COMPACT)                                                    \
ATTR static int64_t ts_look_tric_##SUFFIX(float ax, float ay, float az, const ts_seg_t *seg,      \
                                          int64_t nseg, const float *bx, const float *by,          \
                                          const float *bz, float near, float far, int32_t *cand,   \
                                          int32_t *cseg, float *cd2) {                             \
    TS_LOOK_SEGMENTS(W, COMPACT, {                                                                 \
        tsF gx = (ax - x) + seg[g].f[0], gy = (ay - y) + seg[g].f[1], gz = (az - z) + seg[g].f[2]; \
        r = gx * gx + gy * gy + gz * gz;                                                           \
    })                                                                                             \
}                                                                                                  \
ATTR static int64_t ts_look_ortho_##SUFFIX(float ax, float ay, float az, const float *half,       \
                                           const float *len, const ts_seg_t *seg, int64_t nseg,    \
                                           const float *bx, const float *by, const float *bz,      \
                                           float near, float far, int32_t *cand, int32_t *cseg,    \
                                           float *cd2) {                                           \
    const float h0 = half[0], h1 = half[1], h2 = half[2], l0 = len[0], l1 = len[1], l2 = len[2];   \
    TS_LOOK_SEGMENTS(W, COMPACT, {                                                                 \
        tsF gx = ax - x, gy = ay - y, gz = az - z;                                                 \
        gx = TS_LOOK_IMAGE(gx, h0, l0);                                                            \
        gy = TS_LOOK_IMAGE(gy, h1, l1);                                                            \
        gz = TS_LOOK_IMAGE(gz, h2, l2);                                                            \
        r = gx * gx + gy * gy + gz * gz;                                                           \
    })                                                                                             \
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

/* The first look at segments seg (nseg) for the atom at ax, ay, az: the candidates with d2 <= near or
 * d2 >= far, in order, as their positions (cand), segments (cseg) and squared distances (cd2), each as
 * long as the segments' atoms and TS_LOOK_PAD more; returns how many. */
static inline int64_t ts_look_tric(int level, float ax, float ay, float az, const ts_seg_t *seg, int64_t nseg,
                                   const float *bx, const float *by, const float *bz, float near, float far,
                                   int32_t *cand, int32_t *cseg, float *cd2) {
#if defined(__GNUC__)
#ifdef TS_LOOK_X86
    if (level == 3)
        return ts_look_tric_avx512(ax, ay, az, seg, nseg, bx, by, bz, near, far, cand, cseg, cd2);
    if (level == 2)
        return ts_look_tric_avx2(ax, ay, az, seg, nseg, bx, by, bz, near, far, cand, cseg, cd2);
#endif
    (void)level;
    return ts_look_tric_base(ax, ay, az, seg, nseg, bx, by, bz, near, far, cand, cseg, cd2);
#else
    int64_t c = 0;
    (void)level;
    for (int64_t g = 0; g < nseg; g++)
        for (int64_t j = seg[g].p; j < seg[g].pe; j++) {
            float gx = (ax - bx[j]) + seg[g].f[0], gy = (ay - by[j]) + seg[g].f[1], gz = (az - bz[j]) + seg[g].f[2];
            float r = gx * gx + gy * gy + gz * gz;
            if (r <= near || r >= far) {
                cand[c] = (int32_t)j;
                cseg[c] = (int32_t)g;
                cd2[c++] = r;
            }
        }
    return c;
#endif
}

static inline int64_t ts_look_ortho(int level, float ax, float ay, float az, const float *half,
                                    const float *len, const ts_seg_t *seg, int64_t nseg, const float *bx,
                                    const float *by, const float *bz, float near, float far, int32_t *cand,
                                    int32_t *cseg, float *cd2) {
#if defined(__GNUC__)
#ifdef TS_LOOK_X86
    if (level == 3)
        return ts_look_ortho_avx512(ax, ay, az, half, len, seg, nseg, bx, by, bz, near, far, cand, cseg, cd2);
    if (level == 2)
        return ts_look_ortho_avx2(ax, ay, az, half, len, seg, nseg, bx, by, bz, near, far, cand, cseg, cd2);
#endif
    (void)level;
    return ts_look_ortho_base(ax, ay, az, half, len, seg, nseg, bx, by, bz, near, far, cand, cseg, cd2);
#else
    int64_t c = 0;
    (void)level;
    for (int64_t g = 0; g < nseg; g++)
        for (int64_t j = seg[g].p; j < seg[g].pe; j++) {
            float v[3] = {ax - bx[j], ay - by[j], az - bz[j]};
            for (int k = 0; k < 3; k++)
                v[k] = v[k] > half[k] ? v[k] - len[k] : (v[k] <= -half[k] ? v[k] + len[k] : v[k]);
            float r = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
            if (r <= near || r >= far) {
                cand[c] = (int32_t)j;
                cseg[c] = (int32_t)g;
                cd2[c++] = r;
            }
        }
    return c;
#endif
}

#endif
