/* Hidden-unit activations of the random-network surrogate, over arrays of pre-activations.
 *
 * Kinds: softplus log(1 + e^x), sigmoid 1/(1 + e^-x), tanh, and exp (the RBF node, whose
 * pre-activation -gamma |x - c|^2 / 2 is never positive). Each needs one exp(-|x|) per unit,
 * taken from the branch-free exp of _vecmath.h so that the loops vectorise; the softplus value
 * also needs log(1 + t) for t in (0, 1], computed as 2 atanh(u), u = t / (2 + t) <= 1/3, by
 * its odd series (17 terms reach 1e-17), which vectorises where libm's log1p does not.
 * With t = exp(-|x|):
 *   softplus' = sigmoid = (x >= 0 ? 1 : t) / (1 + t),  softplus'' = t / (1 + t)^2
 *   sigmoid'  = t / (1 + t)^2,  sigmoid'' = sigmoid' * (x >= 0 ? t - 1 : 1 - t) / (1 + t)
 *   tanh      = sign(x) (1 - u) / (1 + u), u = exp(-2|x|),  tanh' = 4u / (1 + u)^2,
 *   tanh''    = -2 tanh tanh'.
 * Third derivatives (for the derivatives of a surrogate-Hessian metric), with s = sigmoid:
 *   softplus''' = s (1 - s)(1 - 2 s),  sigmoid''' = s (1 - s)(1 - 6 s (1 - s)),
 *   tanh''' = -2 tanh' (1 - 3 tanh^2),  exp''' = exp.
 */
#ifndef RNSHMC_ACTIVATIONS_H
#define RNSHMC_ACTIVATIONS_H

#include "_vecmath.h"

enum { RNSHMC_SOFTPLUS = 0, RNSHMC_SIGMOID = 1, RNSHMC_TANH = 2, RNSHMC_EXP = 3 };

/* log(1 + t) for 0 <= t <= 1, branch-free; relative error a few ulp */
RNSHMC_INLINE double rnshmc_log1p_unit(double t)
{
    double u = t / (2.0 + t), u2 = u * u;
    double p = 1.0 / 35.0;
    p = p * u2 + 1.0 / 33.0;
    p = p * u2 + 1.0 / 31.0;
    p = p * u2 + 1.0 / 29.0;
    p = p * u2 + 1.0 / 27.0;
    p = p * u2 + 1.0 / 25.0;
    p = p * u2 + 1.0 / 23.0;
    p = p * u2 + 1.0 / 21.0;
    p = p * u2 + 1.0 / 19.0;
    p = p * u2 + 1.0 / 17.0;
    p = p * u2 + 1.0 / 15.0;
    p = p * u2 + 1.0 / 13.0;
    p = p * u2 + 1.0 / 11.0;
    p = p * u2 + 1.0 / 9.0;
    p = p * u2 + 1.0 / 7.0;
    p = p * u2 + 1.0 / 5.0;
    p = p * u2 + 1.0 / 3.0;
    return 2.0 * u * (1.0 + u2 * p);
}

/* value, slope and curvature of one unit */
RNSHMC_INLINE double rnshmc_slope(int kind, double x)
{
    double ax = fabs(x);
    if (kind == RNSHMC_SOFTPLUS) {
        double t = rnshmc_exp_nonpositive(-ax);
        return (x >= 0.0 ? 1.0 : t) / (1.0 + t);
    } else if (kind == RNSHMC_SIGMOID) {
        double t = rnshmc_exp_nonpositive(-ax);
        return t / ((1.0 + t) * (1.0 + t));
    } else if (kind == RNSHMC_TANH) {
        double u = rnshmc_exp_nonpositive(-2.0 * ax);
        return 4.0 * u / ((1.0 + u) * (1.0 + u));
    }
    return rnshmc_exp_nonpositive(x);
}

RNSHMC_INLINE double rnshmc_value(int kind, double x)
{
    double ax = fabs(x);
    if (kind == RNSHMC_SOFTPLUS) {
        return (x > 0.0 ? x : 0.0) + rnshmc_log1p_unit(rnshmc_exp_nonpositive(-ax));
    } else if (kind == RNSHMC_SIGMOID) {
        double t = rnshmc_exp_nonpositive(-ax);
        return (x >= 0.0 ? 1.0 : t) / (1.0 + t);
    } else if (kind == RNSHMC_TANH) {
        double u = rnshmc_exp_nonpositive(-2.0 * ax);
        double magnitude = (1.0 - u) / (1.0 + u);
        return x >= 0.0 ? magnitude : -magnitude;
    }
    return rnshmc_exp_nonpositive(x);
}

RNSHMC_INLINE double rnshmc_curvature(int kind, double x)
{
    double ax = fabs(x);
    if (kind == RNSHMC_SOFTPLUS) {
        double t = rnshmc_exp_nonpositive(-ax);
        return t / ((1.0 + t) * (1.0 + t));
    } else if (kind == RNSHMC_SIGMOID) {
        double t = rnshmc_exp_nonpositive(-ax);
        double slope = t / ((1.0 + t) * (1.0 + t));
        return slope * (x >= 0.0 ? t - 1.0 : 1.0 - t) / (1.0 + t);
    } else if (kind == RNSHMC_TANH) {
        double u = rnshmc_exp_nonpositive(-2.0 * ax);
        double magnitude = (1.0 - u) / (1.0 + u);
        double tanh_x = x >= 0.0 ? magnitude : -magnitude;
        return -2.0 * tanh_x * 4.0 * u / ((1.0 + u) * (1.0 + u));
    }
    return rnshmc_exp_nonpositive(x);
}

RNSHMC_INLINE double rnshmc_third(int kind, double x)
{
    double ax = fabs(x);
    if (kind == RNSHMC_SOFTPLUS || kind == RNSHMC_SIGMOID) {
        double t = rnshmc_exp_nonpositive(-ax);
        double s1 = t / ((1.0 + t) * (1.0 + t));          /* s (1 - s) */
        if (kind == RNSHMC_SIGMOID) return s1 * (1.0 - 6.0 * s1);
        return s1 * (x >= 0.0 ? t - 1.0 : 1.0 - t) / (1.0 + t);   /* 1 - 2 s */
    } else if (kind == RNSHMC_TANH) {
        double u = rnshmc_exp_nonpositive(-2.0 * ax);
        double magnitude = (1.0 - u) / (1.0 + u);
        double slope = 4.0 * u / ((1.0 + u) * (1.0 + u));
        return -2.0 * slope * (1.0 - 3.0 * magnitude * magnitude);
    }
    return rnshmc_exp_nonpositive(x);
}

/* coef[i] = v[i] * a'(pre[i]) for n units: the gradient's hidden-layer pass. The kind is
 * hoisted out of the loop so that each branch is a plain vectorisable loop. */
RNSHMC_CLONES
static void rnshmc_weighted_slopes(int kind, const double *pre, const double *v, Py_ssize_t n,
                                   double *coef)
{
    switch (kind) {
    case RNSHMC_SOFTPLUS:
        RNSHMC_PRAGMA(omp simd)
        for (Py_ssize_t i = 0; i < n; i++) coef[i] = v[i] * rnshmc_slope(RNSHMC_SOFTPLUS, pre[i]);
        break;
    case RNSHMC_SIGMOID:
        RNSHMC_PRAGMA(omp simd)
        for (Py_ssize_t i = 0; i < n; i++) coef[i] = v[i] * rnshmc_slope(RNSHMC_SIGMOID, pre[i]);
        break;
    case RNSHMC_TANH:
        RNSHMC_PRAGMA(omp simd)
        for (Py_ssize_t i = 0; i < n; i++) coef[i] = v[i] * rnshmc_slope(RNSHMC_TANH, pre[i]);
        break;
    default:
        RNSHMC_PRAGMA(omp simd)
        for (Py_ssize_t i = 0; i < n; i++) coef[i] = v[i] * rnshmc_exp_nonpositive(pre[i]);
    }
}

/* sum_i v[i] * a(pre[i]) */
RNSHMC_CLONES
static double rnshmc_weighted_values(int kind, const double *pre, const double *v, Py_ssize_t n)
{
    double total = 0.0;
    switch (kind) {
    case RNSHMC_SOFTPLUS:
        RNSHMC_PRAGMA(omp simd reduction(+:total))
        for (Py_ssize_t i = 0; i < n; i++) total += v[i] * rnshmc_value(RNSHMC_SOFTPLUS, pre[i]);
        break;
    case RNSHMC_SIGMOID:
        RNSHMC_PRAGMA(omp simd reduction(+:total))
        for (Py_ssize_t i = 0; i < n; i++) total += v[i] * rnshmc_value(RNSHMC_SIGMOID, pre[i]);
        break;
    case RNSHMC_TANH:
        RNSHMC_PRAGMA(omp simd reduction(+:total))
        for (Py_ssize_t i = 0; i < n; i++) total += v[i] * rnshmc_value(RNSHMC_TANH, pre[i]);
        break;
    default:
        RNSHMC_PRAGMA(omp simd reduction(+:total))
        for (Py_ssize_t i = 0; i < n; i++) total += v[i] * rnshmc_exp_nonpositive(pre[i]);
    }
    return total;
}

/* Elementwise over n entries: values[i] = a(pre[i]), and slopes[i] = a'(pre[i]) and
 * curvatures[i] = a''(pre[i]) where those pointers are not NULL (the fit's hidden matrices). */
RNSHMC_CLONES
static void rnshmc_activation_table(int kind, const double *pre, Py_ssize_t n, double *values,
                                    double *slopes, double *curvatures)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (values != NULL) values[i] = rnshmc_value(kind, pre[i]);
        if (slopes != NULL) slopes[i] = rnshmc_slope(kind, pre[i]);
        if (curvatures != NULL) curvatures[i] = rnshmc_curvature(kind, pre[i]);
    }
}

#endif
