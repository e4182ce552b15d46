# OpenMP helpers that compile with or without OpenMP (Apple clang has none by default).
cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define RNSHMC_OPENMP_ENABLED 1
    #else
    #define RNSHMC_OPENMP_ENABLED 0
    static int omp_get_max_threads(void) { return 1; }
    #endif
    """
    bint RNSHMC_OPENMP_ENABLED
    int omp_get_max_threads() noexcept nogil
