/* Fixed-point sums over frames (see _sums.pyx): one row of a tile of atoms.  A double v with
 * |v| < 2**51 becomes the integer nearest
 * to it (ties to even) as bits(v + 1.5*2**52) - bits(1.5*2**52): an addition and an integer
 * subtraction, no conversion instruction (x86-64's SSE2 has none from double to int64). */
#ifndef TRAJSCALE_FIXED_SUMS_H
#define TRAJSCALE_FIXED_SUMS_H
#include <stdint.h>
#include <string.h>

#define TS_MAGIC 6755399441055744.0       /* 1.5 * 2**52 */
#define TS_S1 1099511627776.0             /* 2**40: grid of the sums */
#define TS_S2 256.0                       /* 2**8: the square's integer word counts 2**-8 */
#define TS_S32 4294967296.0               /* 2**32 */

static inline int64_t ts_bits(double v) { int64_t i; memcpy(&i, &v, sizeof i); return i; }

/* Adds n values d = x - shift into the four accumulator rows; returns 0 if every |d| < limit
 * (NaN fails), else 1.  Row layout: acc[0..3][n] = sum hi, sum lo, square hi, square lo. */
#define TS_ROW(NAME, REAL)                                                                         \
static inline int NAME(const REAL *x, const double *shift, int64_t *restrict s_hi,                 \
                       int64_t *restrict s_lo, int64_t *restrict q_hi, int64_t *restrict q_lo,      \
                       int64_t n, int squares, double limit) {                                      \
    const int64_t magic = ts_bits(TS_MAGIC);                                                        \
    int bad = 0;                                                                                    \
    for (int64_t i = 0; i < n; i++) {                                                               \
        double d = (double)x[i] - shift[i];                                                         \
        bad |= (d >= limit) | (d <= -limit) | (d != d);   /* no branch: NaN fails too */            \
        int64_t q = ts_bits(d * TS_S1 + TS_MAGIC) - magic;                                          \
        s_hi[i] += q >> 32;                                                                         \
        s_lo[i] += q & 0xFFFFFFFF;                                                                  \
    }                                                                                               \
    if (squares) {                                                                                  \
        for (int64_t i = 0; i < n; i++) {                                                           \
            double d = (double)x[i] - shift[i];                                                     \
            double sq = d * d * TS_S2;                   /* < 2**30 */                              \
            int64_t w = (int64_t)sq;                     /* truncation = floor, as sq >= 0 */       \
            double t = (sq - (double)w) * TS_S32;        /* the fraction, exact, in [0, 2**32) */   \
            q_hi[i] += w;                                                                           \
            q_lo[i] += ts_bits(t + TS_MAGIC) - magic;                                               \
        }                                                                                           \
    }                                                                                               \
    return bad;                                                                                     \
}

TS_ROW(ts_row_f32, float)
TS_ROW(ts_row_f64, double)

#endif
