# The hidden-unit activations of the random network (_activations.h), declared once for the
# surrogate and for the metrics built on its Hessian, so that neither module has to load the
# other for them.
cdef extern from "_activations.h":
    enum:
        RNSHMC_SOFTPLUS
        RNSHMC_SIGMOID
        RNSHMC_TANH
        RNSHMC_EXP
    void weighted_slopes "rnshmc_weighted_slopes" (
        int kind, const double* pre, const double* v, Py_ssize_t n, double* coef) noexcept nogil
    double weighted_values "rnshmc_weighted_values" (
        int kind, const double* pre, const double* v, Py_ssize_t n) noexcept nogil
    void activation_table "rnshmc_activation_table" (
        int kind, const double* pre, Py_ssize_t n, double* values, double* slopes,
        double* curvatures) noexcept nogil
    double activation_curvature "rnshmc_curvature" (int kind, double x) noexcept nogil
    double activation_third "rnshmc_third" (int kind, double x) noexcept nogil


cdef inline dict activation_kinds():
    """The activations' names and their kinds (``_surrogate.ACTIVATIONS``)."""
    return {"softplus": RNSHMC_SOFTPLUS, "sigmoid": RNSHMC_SIGMOID, "tanh": RNSHMC_TANH,
            "exp": RNSHMC_EXP}
