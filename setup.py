"""Build the Cython kernels.

Compiler directives are set once here. ``RNSHMC_CHECKS=1`` turns bounds, wraparound and
initialisation checks back on (for one debugging/test run); ``RNSHMC_OPENMP=0`` forces a
serial build.  OpenMP is used where the compiler accepts it (gcc, MSVC); elsewhere (Apple clang)
the ``prange`` loops compile to serial loops.
"""
import os
import sys
import tempfile
from glob import glob

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools._distutils.ccompiler import new_compiler
from setuptools._distutils.errors import CompileError, LinkError
from setuptools._distutils.sysconfig import customize_compiler

checks = os.environ.get("RNSHMC_CHECKS", "0") == "1"
directives = {
    "language_level": "3",
    "boundscheck": checks,
    "wraparound": checks,
    "initializedcheck": checks,
    "cdivision": not checks,
    "embedsignature": True,
}


def openmp_flags():
    """Return (compile_args, link_args) enabling OpenMP, or empty lists if unsupported."""
    if os.environ.get("RNSHMC_OPENMP", "1") == "0":
        return [], []
    if sys.platform == "win32":
        return ["/openmp"], []
    flags = ["-fopenmp"]
    compiler = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "omp_test.c")
        with open(src, "w") as f:
            f.write("#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n")
        try:
            objs = compiler.compile([src], output_dir=tmp, extra_postargs=flags)
            compiler.link_executable(objs, os.path.join(tmp, "omp_test"), extra_postargs=flags)
        except (CompileError, LinkError):
            print("rnshmc: OpenMP not available, building serial kernels")
            return [], []
    return flags, flags


omp_compile, omp_link = openmp_flags()
base_compile = ["/O2"] if sys.platform == "win32" else ["-O3"]
numpy_random_lib = os.path.join(np.get_include(), "..", "..", "random", "lib")

extensions = []
for pyx in sorted(glob("rnshmc/_kernels/*.pyx")):
    name = pyx[:-4].replace("/", ".").replace("\\", ".")
    extensions.append(
        Extension(
            name,
            [pyx],
            include_dirs=[np.get_include(), "rnshmc/_kernels"],
            library_dirs=[numpy_random_lib],
            libraries=["npyrandom"] + ([] if sys.platform == "win32" else ["m"]),
            extra_compile_args=base_compile + omp_compile,
            extra_link_args=omp_link,
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_9_API_VERSION"),
                           ("RNSHMC_BOUNDS_CHECKS", "1" if checks else "0")],
        )
    )

# cythonize and compile the modules in parallel on this machine's cores (a fresh build is most
# of a CI run's time)
jobs = os.cpu_count() or 1
setup(ext_modules=cythonize(extensions, compiler_directives=directives, nthreads=jobs),
      options={"build_ext": {"parallel": jobs}})
