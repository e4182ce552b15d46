/* Portable helpers shared by the vectorised C kernels: function multi-versioning for x86-64,
 * OpenMP `simd` pragmas, forced inlining, prefetch, and a branch-free exp for x <= 0.
 *
 * A libm exp cannot be vectorised without -ffast-math, and in the row and hidden-unit loops it
 * costs more than the arithmetic around it, so the loops use rnshmc_exp_nonpositive: range
 * reduction by ln 2, a degree-13 Taylor polynomial and scaling by 2^k built in the exponent
 * bits (relative error < 3e-16). Every exp these kernels need can be written as exp(-|x|).
 */
#ifndef RNSHMC_VECMATH_H
#define RNSHMC_VECMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && __GNUC__ >= 11
#define RNSHMC_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RNSHMC_CLONES
#endif

#if defined(_OPENMP) && !defined(_MSC_VER)
#define RNSHMC_PRAGMA(x) _Pragma(#x)
#else
#define RNSHMC_PRAGMA(x)
#endif

/* Helpers are forced inline so that each clone of an entry point compiles them for its ISA. */
#if defined(__GNUC__)
#define RNSHMC_INLINE static inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define RNSHMC_INLINE static __forceinline
#else
#define RNSHMC_INLINE static inline
#endif

#if defined(__GNUC__)
#define RNSHMC_PREFETCH(address) __builtin_prefetch((address), 0, 3)
#else
#define RNSHMC_PREFETCH(address) ((void)0)
#endif

/* exp(x) for x <= 0 (x = -|eta|), branch-free; x below -708 is clamped (exp ~ 3e-308). */
RNSHMC_INLINE double rnshmc_exp_nonpositive(double x)
{
    const double log2e = 1.4426950408889634;
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    const double shift = 6755399441055744.0; /* 0x1.8p52: adding it rounds to an integer */
    x = x < -708.0 ? -708.0 : x;
    double kd = x * log2e + shift;
    uint64_t ki;
    memcpy(&ki, &kd, sizeof ki);
    kd -= shift;
    double r = (x - kd * ln2_hi) - kd * ln2_lo; /* |r| <= ln2 / 2 */
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    /* 2^k from the low bits of ki (= k + 1.5 * 2^52): (k + 1023) << 52 */
    uint64_t bits = (ki + 1023u) << 52;
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif
