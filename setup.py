"""Build the Cython kernels.

Compiler directives are set once here. ``RNSHMC_CHECKS=1`` turns bounds, wraparound and
initialisation checks back on (for one debugging/test run); ``RNSHMC_OPENMP=0`` forces a
serial build.  OpenMP is used where the compiler accepts it: gcc's libgomp, MSVC's ``/openmp``,
Apple clang with LLVM's libomp (Homebrew's ``libomp`` or ``$LIBOMP_PREFIX``); elsewhere the
``prange`` loops compile to serial loops.
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


def openmp_candidates():
    """(compile_args, link_args) to try, in order, for this platform's compiler."""
    if sys.platform == "win32":
        return [(["/openmp"], [])]  # MSVC's own runtime (vcomp), shipped with Python
    if sys.platform == "darwin":
        # Apple clang has no OpenMP runtime of its own: LLVM's libomp (Homebrew's ``libomp``,
        # or any prefix in $LIBOMP_PREFIX), which delocate then vendors into the wheel
        prefixes = [os.environ.get("LIBOMP_PREFIX"), "/opt/homebrew/opt/libomp",
                    "/usr/local/opt/libomp"]
        return [(["-Xpreprocessor", "-fopenmp", f"-I{prefix}/include"],
                 [f"-L{prefix}/lib", "-lomp", f"-Wl,-rpath,{prefix}/lib"])
                for prefix in prefixes if prefix and os.path.isdir(prefix)] + [(["-fopenmp"],
                                                                                 ["-fopenmp"])]
    return [(["-fopenmp"], ["-fopenmp"])]  # gcc's libgomp (auditwheel vendors it)


def openmp_flags():
    """Return (compile_args, link_args) enabling OpenMP, or empty lists if unsupported."""
    if os.environ.get("RNSHMC_OPENMP", "1") == "0":
        return [], []
    compiler = new_compiler()
    customize_compiler(compiler)
    for compile_args, link_args in openmp_candidates():
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "omp_test.c")
            with open(src, "w") as f:
                f.write("#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n")
            try:
                objs = compiler.compile([src], output_dir=tmp, extra_postargs=compile_args)
                compiler.link_executable(objs, os.path.join(tmp, "omp_test"),
                                         extra_postargs=link_args)
            except (CompileError, LinkError):
                continue
        return compile_args, link_args
    print("rnshmc: OpenMP not available, building serial kernels")
    return [], []


omp_compile, omp_link = openmp_flags()
# -g0: no debug information (a quarter of the wheel's size, a fifth less compile time)
base_compile = ["/O2"] if sys.platform == "win32" else ["-O3", "-g0"]
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
            # built against NumPy 2 and targeting NumPy 1.25's C API: one wheel serves
            # NumPy 1.25+ and 2.x (the package's dependency range)
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_9_API_VERSION"),
                           ("NPY_TARGET_VERSION", "NPY_1_25_API_VERSION"),
                           ("RNSHMC_BOUNDS_CHECKS", "1" if checks else "0")],
        )
    )

# cythonize and compile the modules in parallel on this machine's cores (a fresh build is most
# of a CI run's time)
jobs = os.cpu_count() or 1
setup(ext_modules=cythonize(extensions, compiler_directives=directives, nthreads=jobs),
      options={"build_ext": {"parallel": jobs}})
