"""Bit-generator access for the C loops.

Kernels never own an RNG: they draw from the ``bitgen_t`` of the caller's
``numpy.random.Generator``, holding the bit generator's lock for the whole call.
"""
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid

import numpy as np


cdef bitgen_t* get_bitgen(object bit_generator) except NULL:
    """The ``bitgen_t`` behind a NumPy BitGenerator (keep a reference while it is used)."""
    capsule = bit_generator.capsule
    if not PyCapsule_IsValid(capsule, "BitGenerator"):
        raise ValueError("invalid NumPy bit generator capsule")
    return <bitgen_t*> PyCapsule_GetPointer(capsule, "BitGenerator")


def _standard_normal_memview(generator, Py_ssize_t n):
    """Test twin: ``n`` standard normals drawn from C; equal to ``generator.standard_normal(n)``."""
    out = np.empty(n, dtype=np.float64)
    if n == 0:
        return out
    cdef double[::1] out_view = out
    bit_generator = generator.bit_generator
    cdef bitgen_t* bitgen = get_bitgen(bit_generator)
    with bit_generator.lock, nogil:
        random_standard_normal_fill(bitgen, n, &out_view[0])
    return out
