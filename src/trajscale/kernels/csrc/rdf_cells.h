/* The RDF search's second selection, each frame (see _pairs.pyx): its atoms gathered from the frame,
 * wrapped into the box as MDAnalysis's _triclinic_pbc / _ortho_pbc (calc_distances.h) wrap them, and
 * given their cell of the search's grid (_pairs.pyx's _cell_r), four (AVX2) or eight (AVX-512) atoms at a
 * time (_pairs.pyx keeps its scalar code where the CPU has neither: SSE2's vectors were slower).
 *
 * MDAnalysis's wrap moves an atom by at most one box vector along each axis on its common path, and
 * takes a slower path (floor of the box coordinates) for an atom further out.  Here the common path is
 * computed for every atom with selects instead of branches (about a quarter of a solvated box's atoms
 * lie outside the triclinic cell, and their branches were mispredicted), each step the same float32 or
 * double operation as MDAnalysis's, so a wrapped coordinate is the same bits.  An atom that needs the
 * slower path keeps its coordinates and gets the cell -1: the caller wraps it with the scalar code.
 * Every step is one IEEE operation (no FMA: -ffp-contract=off, no "fma" target), so the bits are the
 * same at any vector width: the x86-64 baseline (SSE2), AVX2 or AVX-512, chosen at run time.  A compiler
 * without GCC's vector extensions gets every atom's cell -1 (the scalar code then does all of them). */
#ifndef TRAJSCALE_RDF_CELLS_H
#define TRAJSCALE_RDF_CELLS_H
#include <stdint.h>
#include <string.h>

#include "simd_level.h"

typedef struct {
    float box[9];            /* box vectors (rows), float32 */
    float len[3];            /* orthorhombic box lengths */
    double zf, bi3, bi6;     /* _triclinic_pbc's double factors */
    float tol;               /* bound on the float32 bounds' distance from _triclinic_pbc's double ones */
    double h3, h6, h7;       /* box vectors' off-diagonal elements, as doubles */
    double rh[3], dn[3];     /* inverses of the diagonal, cells per axis (_cell_r) */
    int32_t n[3];            /* cells per axis */
} ts_cells_t;

/* Asks for the cache line at p to be fetched into the cache (a hint; nothing where the compiler has none). */
static inline void ts_prefetch(const void *p) {
#if defined(__GNUC__)
    __builtin_prefetch(p, 0, 2);
#else
    (void)p;
#endif
}

/* Gathers atoms idx (n) of frame x (N, 3) into X, Y, Z. */
static inline void ts_gather(const float *x, const int64_t *idx, int64_t n, float *X, float *Y, float *Z) {
    for (int64_t i = 0; i < n; i++) {
        const float *p = x + 3 * idx[i];
        X[i] = p[0];
        Y[i] = p[1];
        Z[i] = p[2];
    }
}

#if defined(__GNUC__)
/* Lanes of four (SSE2, AVX2: a vector of four doubles is one register or two) or eight (AVX-512): a
 * wider vector of doubles than the registers hold has its comparisons done lane by lane. */
typedef float ts_f4 __attribute__((vector_size(16)));
typedef int32_t ts_i4 __attribute__((vector_size(16)));
typedef double ts_d4 __attribute__((vector_size(32)));
typedef int64_t ts_l4 __attribute__((vector_size(32)));
typedef float ts_f8 __attribute__((vector_size(32)));
typedef int32_t ts_i8 __attribute__((vector_size(32)));
typedef double ts_d8 __attribute__((vector_size(64)));
typedef int64_t ts_l8 __attribute__((vector_size(64)));
#define TS_LANES ((int64_t)(sizeof(tsF) / sizeof(float)))

/* a where mask m (int32 lanes of 0 or -1), else b (float lanes) */
#define TS_SEL(m, a, b) ((tsF)(((tsI)(a) & (m)) | ((tsI)(b) & ~(m))))
#define TS_WIDE(v) __builtin_convertvector((v), tsD)
/* lanes where float a lies within t of b */
#define TS_NEAR(a, b, t) ((tsF)((tsI)((a) - (b)) & 0x7FFFFFFF) <= (t))

/* _clamp_trunc over the lanes: the cell of v = s * n on an axis of n cells, clamped into [0, n) (a NaN
 * into 0), in double lanes: min(max(v, 0), n - 1), truncated */
#define TS_CLAMP(v, top)                                                                           \
    ({ tsD w_ = (tsD)((tsL)(v) & ((v) >= 0.0));                                                    \
       tsL lo_ = w_ < (top);                                                                       \
       w_ = (tsD)(((tsL)w_ & lo_) | ((tsL)((tsD){0} + (top)) & ~lo_));                            \
       __builtin_convertvector(w_, tsI); })

/* The lanes' wrapped coordinates c0, c1, c2 into X, Y, Z at i and their cells (_cell_r's double
 * arithmetic) into cell at i, or their own coordinates o0, o1, o2 and -1 where bad; `cnt` lanes stored. */
#define TS_STORE(i, cnt)                                                                           \
    do {                                                                                           \
        tsD s2 = TS_WIDE(c2) * g->rh[2];                                                           \
        tsD s1 = (TS_WIDE(c1) - s2 * g->h7) * g->rh[1];                                            \
        tsD s0 = (TS_WIDE(c0) - s1 * g->h3 - s2 * g->h6) * g->rh[0];                               \
        tsI cx = TS_CLAMP(s0 * g->dn[0], g->dn[0] - 1.0);                                          \
        tsI cy = TS_CLAMP(s1 * g->dn[1], g->dn[1] - 1.0);                                          \
        tsI cz = TS_CLAMP(s2 * g->dn[2], g->dn[2] - 1.0);                                          \
        tsI k = ((cz * g->n[1] + cy) * g->n[0] + cx) | bad;                                        \
        tsF w0 = TS_SEL(bad, o0, c0), w1 = TS_SEL(bad, o1, c1), w2 = TS_SEL(bad, o2, c2);          \
        memcpy(X + (i), &w0, (cnt) * sizeof(float));                                               \
        memcpy(Y + (i), &w1, (cnt) * sizeof(float));                                               \
        memcpy(Z + (i), &w2, (cnt) * sizeof(float));                                               \
        memcpy(cell + (i), &k, (cnt) * sizeof(int32_t));                                           \
    } while (0)

/* Loads the lanes' atoms at i (`cnt` of them, the rest zero) into o0, o1, o2. */
#define TS_LOAD(i, cnt)                                                                            \
    tsF o0 = {0}, o1 = {0}, o2 = {0};                                                              \
    memcpy(&o0, X + (i), (cnt) * sizeof(float));                                                   \
    memcpy(&o1, Y + (i), (cnt) * sizeof(float));                                                   \
    memcpy(&o2, Z + (i), (cnt) * sizeof(float))

/* _triclinic_pbc's common path, step for step: its float32 moves, and its double comparisons made in
 * float32 (lbf, ubf: the bounds within g->tol of the double ones), a lane within g->tol of a bound, or
 * one a move may leave outside, marked bad (the scalar code decides it) */
#define TS_TRIC_STEP(i, cnt)                                                                       \
    do {                                                                                           \
        TS_LOAD(i, cnt);                                                                           \
        tsF c0 = o0, c1 = o1, c2 = o2, lbf, ubf;                                                   \
        tsI m, bad;                                                                                \
        m = c2 < 0.0f;                                                                             \
        c0 = TS_SEL(m, c0 + b6, c0); c1 = TS_SEL(m, c1 + b7, c1); c2 = TS_SEL(m, c2 + b8, c2);     \
        bad = m & (c2 < 0.0f);                                                                     \
        m = c2 >= b8;                                                                              \
        c0 = TS_SEL(m, c0 - b6, c0); c1 = TS_SEL(m, c1 - b7, c1); c2 = TS_SEL(m, c2 - b8, c2);     \
        bad |= m & (c2 >= b8);                                                                     \
        lbf = c2 * zf;                                                                             \
        ubf = lbf + b4;                                                                            \
        bad |= TS_NEAR(c1, lbf, tol);                                                              \
        m = c1 < lbf;                                                                              \
        c0 = TS_SEL(m, c0 + b3, c0); c1 = TS_SEL(m, c1 + b4, c1);                                  \
        bad |= m & (c1 < lbf + tol);                                                               \
        bad |= TS_NEAR(c1, ubf, tol);                                                              \
        m = c1 >= ubf;                                                                             \
        c0 = TS_SEL(m, c0 - b3, c0); c1 = TS_SEL(m, c1 - b4, c1);                                  \
        bad |= m & (c1 >= ubf - tol);                                                              \
        lbf = -(c1 * bi3 + c2 * bi6) * b0;                                                         \
        ubf = lbf + b0;                                                                            \
        bad |= TS_NEAR(c0, lbf, tol);                                                              \
        m = c0 < lbf;                                                                              \
        c0 = TS_SEL(m, c0 + b0, c0);                                                               \
        bad |= m & (c0 < lbf + tol);                                                               \
        bad |= TS_NEAR(c0, ubf, tol);                                                              \
        m = c0 >= ubf;                                                                             \
        c0 = TS_SEL(m, c0 - b0, c0);                                                               \
        bad |= m & (c0 >= ubf - tol);                                                              \
        TS_STORE(i, cnt);                                                                          \
    } while (0)

/* _ortho_pbc's common path on one axis (float32 comparisons, as MDAnalysis's): c moved by one length l */
#define TS_ORTHO_AXIS(c, l)                                                                        \
    do {                                                                                           \
        tsI m_ = c < 0.0f;                                                                         \
        c = TS_SEL(m_, c + (l), c);                                                                \
        bad |= m_ & (c < 0.0f);                                                                    \
        m_ = c >= (l);                                                                             \
        c = TS_SEL(m_, c - (l), c);                                                                \
        bad |= m_ & (c >= (l));                                                                    \
    } while (0)

#define TS_ORTHO_STEP(i, cnt)                                                                      \
    do {                                                                                           \
        TS_LOAD(i, cnt);                                                                           \
        tsF c0 = o0, c1 = o1, c2 = o2;                                                             \
        tsI bad = {0};                                                                             \
        TS_ORTHO_AXIS(c0, g->len[0]);                                                              \
        TS_ORTHO_AXIS(c1, g->len[1]);                                                              \
        TS_ORTHO_AXIS(c2, g->len[2]);                                                              \
        TS_STORE(i, cnt);                                                                          \
    } while (0)

#define TS_CELLS_LOOPS(SUFFIX, ATTR, W)                                                            \
ATTR static void ts_cells_tric_##SUFFIX(int64_t n, const ts_cells_t *g, float *X, float *Y,       \
                                        float *Z, int32_t *cell) {                                 \
    typedef ts_f##W tsF; typedef ts_i##W tsI; typedef ts_d##W tsD; typedef ts_l##W tsL;            \
    const float b0 = g->box[0], b3 = g->box[3], b4 = g->box[4];                                    \
    const float b6 = g->box[6], b7 = g->box[7], b8 = g->box[8];                                    \
    const float zf = (float)g->zf, bi3 = (float)g->bi3, bi6 = (float)g->bi6, tol = g->tol;         \
    int64_t i = 0;                                                                                 \
    for (; i + TS_LANES <= n; i += TS_LANES)                                                       \
        TS_TRIC_STEP(i, TS_LANES);                                                                 \
    if (i < n)                                                                                     \
        TS_TRIC_STEP(i, n - i);                                                                    \
}                                                                                                  \
ATTR static void ts_cells_ortho_##SUFFIX(int64_t n, const ts_cells_t *g, float *X, float *Y,      \
                                         float *Z, int32_t *cell) {                                \
    typedef ts_f##W tsF; typedef ts_i##W tsI; typedef ts_d##W tsD; typedef ts_l##W tsL;            \
    int64_t i = 0;                                                                                 \
    for (; i + TS_LANES <= n; i += TS_LANES)                                                       \
        TS_ORTHO_STEP(i, TS_LANES);                                                                \
    if (i < n)                                                                                     \
        TS_ORTHO_STEP(i, n - i);                                                                   \
}

TS_CELLS_LOOPS(base, , 4)
#if defined(__x86_64__) || defined(_M_X64)
#define TS_CELLS_X86 1
TS_CELLS_LOOPS(avx2, __attribute__((target("avx2"))), 4)
TS_CELLS_LOOPS(avx512, __attribute__((target("avx512f,avx512dq,avx512vl,prefer-vector-width=512"))), 8)
#endif
#endif   /* __GNUC__ */

/* The vector width to use here, at most ``wanted`` (simd_level.h). */
static int ts_cells_level(int wanted) { return ts_simd_level(wanted); }

/* Atoms idx (n) of frame x (N, 3): wrapped coordinates into X, Y, Z (n each) and cells into cell (n);
 * an atom the common path does not wrap keeps its coordinates and the cell -1. */
static inline void ts_wrap_cells(int level, int triclinic, const float *x, const int64_t *idx, int64_t n,
                                 const ts_cells_t *g, float *X, float *Y, float *Z, int32_t *cell) {
    ts_gather(x, idx, n, X, Y, Z);
#if defined(__GNUC__)
#ifdef TS_CELLS_X86
    if (level == 3) {
        (triclinic ? ts_cells_tric_avx512 : ts_cells_ortho_avx512)(n, g, X, Y, Z, cell);
        return;
    }
    if (level == 2) {
        (triclinic ? ts_cells_tric_avx2 : ts_cells_ortho_avx2)(n, g, X, Y, Z, cell);
        return;
    }
#endif
    (void)level;
    (triclinic ? ts_cells_tric_base : ts_cells_ortho_base)(n, g, X, Y, Z, cell);
#else
    (void)level; (void)triclinic; (void)g;
    for (int64_t i = 0; i < n; i++)
        cell[i] = -1;
#endif
}

#endif
