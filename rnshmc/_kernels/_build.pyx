"""How the kernels were built (for rnshmc.show_versions): with OpenMP or not, with Cython's
bounds checks or not (``RNSHMC_CHECKS=1`` at build time, setup.py)."""
from ._openmp cimport RNSHMC_OPENMP_ENABLED, omp_get_max_threads

cdef extern from *:
    """
    #ifndef RNSHMC_BOUNDS_CHECKS
    #define RNSHMC_BOUNDS_CHECKS 0
    #endif
    """
    int RNSHMC_BOUNDS_CHECKS


def build_info():
    """{"openmp": bool, "openmp_max_threads": int, "bounds_checks": bool} of this build."""
    return dict(openmp=bool(RNSHMC_OPENMP_ENABLED), openmp_max_threads=omp_get_max_threads(),
                bounds_checks=bool(RNSHMC_BOUNDS_CHECKS))
