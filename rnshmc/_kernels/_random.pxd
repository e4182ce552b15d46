# Access to the user's numpy.random.Generator from C: its bit generator (bitgen_t) and NumPy's
# own distribution functions, so a C loop draws exactly the stream the Generator would.
from numpy.random cimport bitgen_t
from numpy.random.c_distributions cimport (
    random_standard_normal_fill, random_standard_uniform, random_interval,
)

cdef bitgen_t* get_bitgen(object bit_generator) except NULL
