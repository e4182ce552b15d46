/* The per-row work of the logistic-regression density, written so that the compiler
 * vectorises it: softplus(eta) - y*eta summed over a block of rows and, optionally, the
 * residual sigmoid(eta) - y written back over eta.
 *
 * A libm exp/log1p per row cost more than reading the row (d = 50) and cannot be vectorised
 * without -ffast-math, so:
 *   - exp(-|eta|) is computed branch-free (range reduction by ln 2, degree-13 Taylor polynomial,
 *     scaling by 2^k built in the exponent bits); relative error < 3e-16;
 *   - log(1 + t) is summed as the log of a product over chunks of 64 rows (each factor is in
 *     (1, 2], so a chunk's product cannot overflow): one log per chunk;
 *   - sums use OpenMP `simd` reductions (honoured with -fopenmp, ignored otherwise);
 *   - on x86-64 Linux with gcc, the function is cloned for AVX2/FMA and AVX-512 and picked at
 *     load time, so a portable wheel still runs the wide loops.
 */
#ifndef RNSHMC_LOGISTIC_BLOCK_H
#define RNSHMC_LOGISTIC_BLOCK_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && __GNUC__ >= 11
#define RNSHMC_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RNSHMC_CLONES
#endif

#if defined(_OPENMP) && !defined(_MSC_VER)
#define RNSHMC_SIMD_REDUCTION _Pragma("omp simd reduction(+:linear) reduction(*:product)")
#else
#define RNSHMC_SIMD_REDUCTION
#endif

#if defined(_OPENMP) && !defined(_MSC_VER)
#define RNSHMC_SIMD _Pragma("omp simd")
#define RNSHMC_SIMD_DOTS _Pragma("omp simd reduction(+:s0,s1,s2,s3,s4,s5,s6,s7)")
#else
#define RNSHMC_SIMD_DOTS
#define RNSHMC_SIMD
#endif

#define RNSHMC_LOG_CHUNK 64

/* exp(x) for x <= 0 (x = -|eta|), branch-free; x below -708 is clamped (exp ~ 3e-308). */
static inline double rnshmc_exp_nonpositive(double x)
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

/* Sum over rows of softplus(eta) - y * eta; if want_residual, eta[i] <- sigmoid(eta) - y. */
RNSHMC_CLONES
static double rnshmc_logistic_block(double *eta, const double *y, Py_ssize_t n, int want_residual)
{
    double total = 0.0;
    for (Py_ssize_t start = 0; start < n; start += RNSHMC_LOG_CHUNK) {
        Py_ssize_t stop = start + RNSHMC_LOG_CHUNK < n ? start + RNSHMC_LOG_CHUNK : n;
        double linear = 0.0, product = 1.0;
        if (want_residual) {
            RNSHMC_SIMD_REDUCTION
            for (Py_ssize_t i = start; i < stop; i++) {
                double e = eta[i];
                double t = rnshmc_exp_nonpositive(-fabs(e));
                double one_plus_t = 1.0 + t;
                product *= one_plus_t;
                linear += (e > 0.0 ? e : 0.0) - y[i] * e;
                eta[i] = (e >= 0.0 ? 1.0 : t) / one_plus_t - y[i];
            }
        } else {
            RNSHMC_SIMD_REDUCTION
            for (Py_ssize_t i = start; i < stop; i++) {
                double e = eta[i];
                double t = rnshmc_exp_nonpositive(-fabs(e));
                product *= 1.0 + t;
                linear += (e > 0.0 ? e : 0.0) - y[i] * e;
            }
        }
        total += linear + log(product);
    }
    return total;
}

/* out = sum_i r[i] * X[i, :] over the n rows of a row-major block of width d (the gradient
 * pass; the block is still in cache from the linear-predictor pass). Eight rows per sweep of out
 * cut the loads and stores of out eightfold; BLAS's gemv is slower for such short columns. */
RNSHMC_CLONES
static void rnshmc_weighted_row_sum(const double *X, const double *r, Py_ssize_t n, Py_ssize_t d,
                                    double *out)
{
    Py_ssize_t i = 0;
    for (Py_ssize_t j = 0; j < d; j++)
        out[j] = 0.0;
    for (; i + 8 <= n; i += 8) {
        const double *x0 = X + i * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
        const double *x4 = x3 + d, *x5 = x4 + d, *x6 = x5 + d, *x7 = x6 + d;
        double r0 = r[i], r1 = r[i + 1], r2 = r[i + 2], r3 = r[i + 3];
        double r4 = r[i + 4], r5 = r[i + 5], r6 = r[i + 6], r7 = r[i + 7];
        RNSHMC_SIMD
        for (Py_ssize_t j = 0; j < d; j++)
            out[j] += (r0 * x0[j] + r1 * x1[j]) + (r2 * x2[j] + r3 * x3[j])
                    + (r4 * x4[j] + r5 * x5[j]) + (r6 * x6[j] + r7 * x7[j]);
    }
    for (; i < n; i++) {
        const double *x = X + i * d;
        double ri = r[i];
        RNSHMC_SIMD
        for (Py_ssize_t j = 0; j < d; j++)
            out[j] += ri * x[j];
    }
}

/* eta[i] = X[i, :] . beta for the n rows of a row-major block of width d, eight rows per sweep
 * of beta (eight independent sums hide the latency of the reductions). */
RNSHMC_CLONES
static void rnshmc_row_dots(const double *X, const double *beta, Py_ssize_t n, Py_ssize_t d,
                            double *eta)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const double *x0 = X + i * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
        const double *x4 = x3 + d, *x5 = x4 + d, *x6 = x5 + d, *x7 = x6 + d;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, s5 = 0.0, s6 = 0.0, s7 = 0.0;
        RNSHMC_SIMD_DOTS
        for (Py_ssize_t j = 0; j < d; j++) {
            double b = beta[j];
            s0 += x0[j] * b; s1 += x1[j] * b; s2 += x2[j] * b; s3 += x3[j] * b;
            s4 += x4[j] * b; s5 += x5[j] * b; s6 += x6[j] * b; s7 += x7[j] * b;
        }
        eta[i] = s0; eta[i + 1] = s1; eta[i + 2] = s2; eta[i + 3] = s3;
        eta[i + 4] = s4; eta[i + 5] = s5; eta[i + 6] = s6; eta[i + 7] = s7;
    }
    for (; i < n; i++) {
        const double *x = X + i * d;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, s5 = 0.0, s6 = 0.0, s7 = 0.0;
        RNSHMC_SIMD_DOTS
        for (Py_ssize_t j = 0; j < d; j++)
            s0 += x[j] * beta[j];
        eta[i] = s0;
    }
}

#endif
