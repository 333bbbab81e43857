/* The vector width a kernel may use on this CPU, at most ``wanted``: 0 the baseline (SSE2 on x86-64),
 * 2 AVX2, 3 AVX-512 (F, DQ and VL). One answer for every kernel that picks its width at run time. */
#ifndef TS_SIMD_LEVEL_H
#define TS_SIMD_LEVEL_H

static inline int ts_simd_level(int wanted) {
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
    __builtin_cpu_init();   /* idempotent; needed where no constructor has run it yet */
    if (wanted >= 3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")
        && __builtin_cpu_supports("avx512vl")) return 3;
    if (wanted >= 2 && __builtin_cpu_supports("avx2")) return 2;
#endif
    (void)wanted;
    return 0;
}

#endif
