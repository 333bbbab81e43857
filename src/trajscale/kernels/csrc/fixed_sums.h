/* Fixed-point sums over frames (see _sums.pyx): one row of a tile of atoms, added into the four
 * accumulator rows of its values (sum hi, sum lo, square hi, square lo).
 *
 * A value d = x - shift (|d| < 2**11) counts q = rint(d * 2**40) (|q| < 2**51, ties to even), added
 * as hi = q >> 32 (floor) and lo = q & 0xFFFFFFFF; its square s = fl(d * d) * 2**8 (< 2**30) counts
 * hi = floor(s) and lo = rint((s - floor(s)) * 2**32), in [0, 2**32].
 *
 * No conversion instructions (x86-64 has none from double to int64 below AVX-512) and no branches,
 * so that the loops vectorise: a double v with |v| < 2**51 is rounded to an integer by v + M,
 * M = 1.5 * 2**52, whose bits are bits(M) + rint(v); the low 32 bits of bits(M) are zero, so rint(v)'s
 * low word is that of the bits and its high word (bits >> 32) - (bits(M) >> 32) (a logical shift:
 * the bits are positive).  Every step is one IEEE operation (no FMA: -ffp-contract=off, no "fma"
 * target) or integer arithmetic, so the words are the same bits at any vector width: the x86-64
 * baseline (SSE2), AVX2 or AVX-512 (a quarter faster than AVX2 on AMD Zen 4), chosen at run time. */
#ifndef TRAJSCALE_FIXED_SUMS_H
#define TRAJSCALE_FIXED_SUMS_H
#include <stdint.h>
#include <string.h>

#include "simd_level.h"

#define TS_MAGIC 6755399441055744.0          /* M = 1.5 * 2**52 */
#define TS_MAGIC_BITS 0x4338000000000000ULL   /* bits(M) */
#define TS_S1 1099511627776.0                /* 2**40: grid of the sums */
#define TS_S2 256.0                          /* 2**8: the square's integer word counts 2**-8 */
#define TS_S32 4294967296.0                  /* 2**32 */
#define TS_ABS 0x7FFFFFFFFFFFFFFFULL         /* all bits but the sign */

#if defined(__GNUC__)
#define TS_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define TS_ALWAYS_INLINE static inline
#endif

static inline uint64_t ts_ubits(double v) { uint64_t i; memcpy(&i, &v, sizeof i); return i; }
static inline double ts_double(uint64_t i) { double v; memcpy(&v, &i, sizeof v); return v; }

/* One value d into the four words' partial sums (see above); bad gets its top bit set if
 * |d| >= limit or d is NaN: |d| < limit <=> bits(|d|) < bits(limit) (NaN's bits are above
 * infinity's), so lb - bits(|d|), with lb = bits(limit) - 1, wraps past 2**63 for a value that fails. */
TS_ALWAYS_INLINE void ts_value(double d, int squares, uint64_t lb, uint64_t *bad, uint64_t *sh, uint64_t *sl,
                               uint64_t *qh, uint64_t *ql) {
    *bad |= lb - (ts_ubits(d) & TS_ABS);
    uint64_t b = ts_ubits(d * TS_S1 + TS_MAGIC);                     /* bits(M) + q */
    *sh += (b >> 32) - (TS_MAGIC_BITS >> 32);
    *sl += b & 0xFFFFFFFFu;
    if (squares) {
        double sq = d * d * TS_S2;
        double rm = sq + TS_MAGIC;                                   /* M + rint(sq) */
        double e = sq - (rm - TS_MAGIC);                             /* sq - rint(sq), exact */
        uint64_t up = -(ts_ubits(e) >> 63);                          /* ~0 where rint rounded up */
        double t = e * TS_S32 + ts_double(ts_ubits(TS_S32) & up);    /* (sq - floor(sq)) * 2**32, exact */
        *qh += ts_ubits(rm) - TS_MAGIC_BITS + up;                    /* floor(sq) */
        *ql += ts_ubits(t + TS_MAGIC) - TS_MAGIC_BITS;               /* rint(t) */
    }
}

/* Frames in eights: each pass over the row reads eight frames' values and adds each word once
 * (integer sums: any grouping gives the same words). */
#define TS_PASS(REAL, SQUARES, K)                                                                  \
    for (int64_t i = 0; i < n; i++) {                                                               \
        uint64_t sh = 0, sl = 0, qh = 0, ql = 0;                                                    \
        double s = shift[i];                                                                        \
        for (int k = 0; k < K; k++)                                                                 \
            ts_value((double)x[k * fstride + i] - s, SQUARES, lb, &bad, &sh, &sl, &qh, &ql);        \
        s_hi[i] += (int64_t)sh;                                                                     \
        s_lo[i] += (int64_t)sl;                                                                     \
        if (SQUARES) {                                                                              \
            q_hi[i] += (int64_t)qh;                                                                 \
            q_lo[i] += (int64_t)ql;                                                                 \
        }                                                                                           \
    }

#define TS_ROWS_SQ(REAL, SQUARES)                                                                  \
    for (; nf >= 8; nf -= 8, x += 8 * fstride) { TS_PASS(REAL, SQUARES, 8) }                        \
    for (; nf >= 1; nf -= 1, x += fstride) { TS_PASS(REAL, SQUARES, 1) }

/* Adds nf frames (x, x + fstride, ...: n values each) of d = x - shift into the accumulator rows;
 * returns 0 if every |d| < limit, else 1 (NaN too: the rows then hold garbage; the caller raises). */
#define TS_ROW(NAME, REAL, ATTR)                                                                   \
ATTR static int NAME(const REAL *x, int64_t fstride, int64_t nf, const double *restrict shift,      \
                     int64_t *restrict s_hi, int64_t *restrict s_lo, int64_t *restrict q_hi,        \
                     int64_t *restrict q_lo, int64_t n, int squares, double limit) {                \
    uint64_t bad = 0, lb = ts_ubits(limit) - 1;                                                     \
    if (squares) {                                                                                  \
        TS_ROWS_SQ(REAL, 1)                                                                         \
    } else {                                                                                        \
        TS_ROWS_SQ(REAL, 0)                                                                         \
    }                                                                                               \
    return (int)(bad >> 63);                                                                        \
}

TS_ROW(ts_row_f32_base, float, )
TS_ROW(ts_row_f64_base, double, )
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
#define TS_FIXED_AVX2 1
TS_ROW(ts_row_f32_avx2, float, __attribute__((target("avx2"))))
TS_ROW(ts_row_f64_avx2, double, __attribute__((target("avx2"))))
TS_ROW(ts_row_f32_avx512, float, __attribute__((target("avx512f,avx512dq,avx512vl,prefer-vector-width=512"))))
TS_ROW(ts_row_f64_avx512, double, __attribute__((target("avx512f,avx512dq,avx512vl,prefer-vector-width=512"))))
#endif

/* The vector width to use here, at most ``wanted`` (simd_level.h). */
static int ts_fixed_level(int wanted) { return ts_simd_level(wanted); }

#ifdef TS_FIXED_AVX2
#define TS_PICK(LEVEL, NAME) ((LEVEL) == 3 ? NAME##_avx512 : (LEVEL) == 2 ? NAME##_avx2 : NAME##_base)
#else
#define TS_PICK(LEVEL, NAME) NAME##_base
#endif

static inline int ts_rows_f32(int level, const float *x, int64_t fstride, int64_t nf, const double *shift,
                              int64_t *s_hi, int64_t *s_lo, int64_t *q_hi, int64_t *q_lo, int64_t n, int squares,
                              double limit) {
    return TS_PICK(level, ts_row_f32)(x, fstride, nf, shift, s_hi, s_lo, q_hi, q_lo, n, squares, limit);
}

static inline int ts_rows_f64(int level, const double *x, int64_t fstride, int64_t nf, const double *shift,
                              int64_t *s_hi, int64_t *s_lo, int64_t *q_hi, int64_t *q_lo, int64_t n, int squares,
                              double limit) {
    return TS_PICK(level, ts_row_f64)(x, fstride, nf, shift, s_hi, s_lo, q_hi, q_lo, n, squares, limit);
}

#endif
