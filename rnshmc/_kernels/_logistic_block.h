/* The per-row work of the logistic-regression density, written so that the compiler vectorises
 * it, fused into one pass over the rows of X:
 *     U_block = sum_i softplus(x_i . beta) - y_i x_i . beta,
 *     g_block = sum_i (sigmoid(x_i . beta) - y_i) x_i.
 * Rows are taken in groups of 16 (6.4 KiB at d = 50, so the gradient sweep re-reads them from
 * L1): linear predictors of the group, then its softplus terms and residuals, then its gradient
 * contribution. X is read from memory once per evaluation.
 *
 * A libm exp/log1p per row cost more than reading the row and cannot be vectorised without
 * -ffast-math, so:
 *   - exp(-|eta|) is the branch-free exp of _vecmath.h;
 *   - log(1 + t) is summed as the log of a product over 64 rows (each factor is in (1, 2], so
 *     the product cannot overflow): one log per 64 rows;
 *   - reductions use OpenMP `simd` pragmas (honoured with -fopenmp, ignored otherwise);
 *   - on x86-64 Linux with gcc the entry points are cloned for AVX2/FMA and AVX-512 and picked
 *     at load time, so a portable wheel still runs the wide loops.
 */
#ifndef RNSHMC_LOGISTIC_BLOCK_H
#define RNSHMC_LOGISTIC_BLOCK_H

#include "_vecmath.h"

#define RNSHMC_GROUP 16        /* rows per group of the fused pass */
#define RNSHMC_LOG_GROUPS 4    /* groups per log of the product of (1 + t) */

/* eta[i] = X[i, :] . beta for n rows of width d; eight rows per sweep of beta, whose eight
 * independent sums hide the latency of the reductions. */
RNSHMC_INLINE void rnshmc_row_dots(const double *X, const double *beta, Py_ssize_t n,
                                   Py_ssize_t d, double *eta)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const double *x0 = X + i * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
        const double *x4 = x3 + d, *x5 = x4 + d, *x6 = x5 + d, *x7 = x6 + d;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, s5 = 0.0, s6 = 0.0, s7 = 0.0;
        RNSHMC_PRAGMA(omp simd reduction(+:s0,s1,s2,s3,s4,s5,s6,s7))
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
        double s = 0.0;
        RNSHMC_PRAGMA(omp simd reduction(+:s))
        for (Py_ssize_t j = 0; j < d; j++)
            s += x[j] * beta[j];
        eta[i] = s;
    }
}

/* out += sum_i r[i] * X[i, :] over n rows of width d; eight rows per sweep of out. */
RNSHMC_INLINE void rnshmc_add_weighted_rows(const double *X, const double *r, Py_ssize_t n,
                                            Py_ssize_t d, double *out)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const double *x0 = X + i * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
        const double *x4 = x3 + d, *x5 = x4 + d, *x6 = x5 + d, *x7 = x6 + d;
        double r0 = r[i], r1 = r[i + 1], r2 = r[i + 2], r3 = r[i + 3];
        double r4 = r[i + 4], r5 = r[i + 5], r6 = r[i + 6], r7 = r[i + 7];
        RNSHMC_PRAGMA(omp simd)
        for (Py_ssize_t j = 0; j < d; j++)
            out[j] += (r0 * x0[j] + r1 * x1[j]) + (r2 * x2[j] + r3 * x3[j])
                    + (r4 * x4[j] + r5 * x5[j]) + (r6 * x6[j] + r7 * x7[j]);
    }
    for (; i < n; i++) {
        const double *x = X + i * d;
        double ri = r[i];
        RNSHMC_PRAGMA(omp simd)
        for (Py_ssize_t j = 0; j < d; j++)
            out[j] += ri * x[j];
    }
}

/* sum_i max(eta_i, 0) - y_i eta_i, multiplying *product by prod_i (1 + exp(-|eta_i|)); if
 * want_residual, eta[i] <- sigmoid(eta_i) - y_i. */
RNSHMC_INLINE double rnshmc_softplus_terms(double *eta, const double *y, Py_ssize_t n,
                                           int want_residual, double *product_inout)
{
    double linear = 0.0, product = 1.0;
    if (want_residual) {
        RNSHMC_PRAGMA(omp simd reduction(+:linear) reduction(*:product))
        for (Py_ssize_t i = 0; i < n; i++) {
            double e = eta[i];
            double t = rnshmc_exp_nonpositive(-fabs(e));
            double one_plus_t = 1.0 + t;
            product *= one_plus_t;
            linear += (e > 0.0 ? e : 0.0) - y[i] * e;
            eta[i] = (e >= 0.0 ? 1.0 : t) / one_plus_t - y[i];
        }
    } else {
        RNSHMC_PRAGMA(omp simd reduction(+:linear) reduction(*:product))
        for (Py_ssize_t i = 0; i < n; i++) {
            double e = eta[i];
            product *= 1.0 + rnshmc_exp_nonpositive(-fabs(e));
            linear += (e > 0.0 ? e : 0.0) - y[i] * e;
        }
    }
    *product_inout *= product;
    return linear;
}

/* The fused pass over n rows (see the top of the file). Writes eta[0..n) (linear predictors,
 * then residuals when grad != NULL) and, if grad != NULL, overwrites grad[0..d) with the
 * block's gradient contribution. Returns the block's potential (without the prior).
 * `prefetch`: software-prefetch the next group (worth it when X does not fit in cache; it
 * costs about a third more when X is cache-resident). */
RNSHMC_CLONES
static double rnshmc_logistic_rows(const double *X, const double *y, const double *beta,
                                   Py_ssize_t n, Py_ssize_t d, double *eta, double *grad,
                                   int prefetch)
{
    double total = 0.0, product = 1.0;
    Py_ssize_t group = 0;
    if (grad != NULL)
        for (Py_ssize_t j = 0; j < d; j++)
            grad[j] = 0.0;
    for (Py_ssize_t start = 0; start < n; start += RNSHMC_GROUP, group++) {
        Py_ssize_t m = n - start < RNSHMC_GROUP ? n - start : RNSHMC_GROUP;
        const double *rows = X + start * d;
        /* Ask for the next group now, so that its load from memory overlaps this group's
         * arithmetic (the hardware prefetcher alone leaves the two in series). */
        if (prefetch && start + RNSHMC_GROUP < n) {
            const char *next = (const char *)(rows + RNSHMC_GROUP * d);
            Py_ssize_t next_rows = n - start - RNSHMC_GROUP < RNSHMC_GROUP ? n - start - RNSHMC_GROUP
                                                                             : RNSHMC_GROUP;
            Py_ssize_t bytes = next_rows * d * (Py_ssize_t)sizeof(double);
            for (Py_ssize_t offset = 0; offset < bytes; offset += 64)
                RNSHMC_PREFETCH(next + offset);
        }
        rnshmc_row_dots(rows, beta, m, d, eta + start);
        total += rnshmc_softplus_terms(eta + start, y + start, m, grad != NULL, &product);
        if (group % RNSHMC_LOG_GROUPS == RNSHMC_LOG_GROUPS - 1) {
            total += log(product);
            product = 1.0;
        }
        if (grad != NULL)
            rnshmc_add_weighted_rows(rows, eta + start, m, d, grad);
    }
    return total + log(product);
}

/* Test twin of the softplus terms alone over n values (one log at the end). */
RNSHMC_CLONES
static double rnshmc_logistic_terms(double *eta, const double *y, Py_ssize_t n, int want_residual)
{
    double total = 0.0;
    for (Py_ssize_t start = 0; start < n; start += RNSHMC_GROUP * RNSHMC_LOG_GROUPS) {
        Py_ssize_t m = n - start < RNSHMC_GROUP * RNSHMC_LOG_GROUPS ? n - start
                                                                     : RNSHMC_GROUP * RNSHMC_LOG_GROUPS;
        double product = 1.0;
        total += rnshmc_softplus_terms(eta + start, y + start, m, want_residual, &product);
        total += log(product);
    }
    return total;
}

#endif
